package agentkit

import (
	"github.com/kubefence/kubefence/pkg/plugin"
)

// NotChecked is the evidence of an identity that could not be compared: the node
// reports none, or the device cannot tell. It is never a match, and never a refusal
// by itself.
const NotChecked = "identity not checked"

// Identity is what one device says it is and how that compares with its node.
type Identity struct {
	// Device names the device's identity in the evidence ("bmc system GUID").
	Device string
	// Node names the node's ("the node's systemUUID").
	Node string
	// Same tells whether got, as the device reports it, and want, as the node reports
	// it, name one machine; form says how they matched (a byte order), for the evidence.
	Same func(got, want string) (form string, same bool)
}

// Check compares got, the device's identity ("" when it cannot tell), with want, the
// node's (req.ExpectIdentity, "" when the node reports none), and records the outcome
// in e and the identity read in e's Result. A mismatch is a TargetMismatch error that
// names both: the caller returns it before it sends anything.
func (id Identity) Check(e *Evidence, got, want string) error {
	e.identity = got
	switch {
	case got == "" && want == "":
		e.Note("%s: the device reports no %s and the node none", NotChecked, id.Device)
	case got == "":
		e.Note("%s: the device reports no %s (%s is %s)", NotChecked, id.Device, id.Node, want)
	case want == "":
		e.Note("%s: %s is %s, the node reports none", NotChecked, id.Device, got)
	default:
		form, same := id.Same(got, want)
		if !same {
			e.Note("%s %s is not %s %s: nothing sent", id.Device, got, id.Node, want)
			return plugin.Errorf(plugin.KindTargetMismatch,
				"%s %s is not %s %s: the target maps to another machine; nothing was sent", id.Device, got, id.Node, want)
		}
		e.Note("%s %s matches %s %s (%s)", id.Device, got, id.Node, want, form)
	}
	return nil
}
