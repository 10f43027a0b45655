package iscsi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// RuleKind says what an ACL rule names.
type RuleKind string

const (
	// RuleIQN admits one initiator by its iSCSI name.
	RuleIQN RuleKind = "iqn"
	// RuleAddr admits initiators by source address: an IP, a subnet, or ALL.
	RuleAddr RuleKind = "addr"
)

// allRule is the address rule that admits every initiator.
const allRule = "ALL"

// Rule is one ACL entry of a target.
type Rule struct {
	Kind  RuleKind
	Value string
	// LUNs are the LUN mappings of an LIO node ACL as "mapped-tpglun" pairs, kept so the
	// ACL can be restored as it was. tgt ACLs have none.
	LUNs []string
}

// Connection is one live connection of an initiator to a target.
type Connection struct {
	Session   string
	ID        string
	Initiator string
	Address   string
}

// Target is one protected unit as a backend reads it: a tgt target or an LIO target
// portal group, with its ACL and live connections.
type Target struct {
	// Name is the target's IQN.
	Name string
	// TPG is the LIO target portal group tag; 0 for tgt, which has none.
	TPG int
	// ID is how the backend addresses the target (the tgt tid, the LIO tpgt directory).
	ID          string
	Rules       []Rule
	Connections []Connection
	// OpenReason is set when the target admits every initiator whatever its rules
	// (LIO demo mode), saying why.
	OpenReason string
}

// Backend is what the agent needs from a storage server. Targets reads ACLs and
// connections together, in one read where the backend allows, so that a verification
// looks at one consistent picture. Unbinding a rule does not end sessions, so closing
// connections is a method of its own.
type Backend interface {
	Targets(ctx context.Context) ([]Target, error)
	Bind(ctx context.Context, t Target, r Rule) error
	Unbind(ctx context.Context, t Target, r Rule) error
	CloseConnection(ctx context.Context, t Target, c Connection) error
}

// Initiator is the node as its storage sees it: an IQN, a source address, or both.
type Initiator struct {
	IQN     string
	Address net.IP
}

func (in Initiator) String() string {
	var parts []string
	if in.IQN != "" {
		parts = append(parts, "iqn="+in.IQN)
	}
	if in.Address != nil {
		parts = append(parts, "addr="+in.Address.String())
	}
	return strings.Join(parts, " ")
}

// owns reports whether r names exactly this initiator, and so is the agent's to remove.
func (in Initiator) owns(r Rule) bool {
	switch r.Kind {
	case RuleIQN:
		return in.IQN != "" && strings.EqualFold(r.Value, in.IQN)
	case RuleAddr:
		ip := net.ParseIP(r.Value)
		return ip != nil && in.Address != nil && ip.Equal(in.Address)
	}
	return false
}

// shared reports why r admits this initiator together with others (ALL, a subnet that
// holds its address), or "" when it does not. Such a rule cannot be removed without
// cutting off other initiators, so a target carrying one cannot fence.
func (in Initiator) shared(r Rule) string {
	if r.Kind != RuleAddr {
		return ""
	}
	if strings.EqualFold(r.Value, allRule) {
		return "its ACL has an ALL rule that admits every initiator"
	}
	if _, subnet, err := net.ParseCIDR(r.Value); err == nil && in.Address != nil && subnet.Contains(in.Address) {
		return "its ACL rule " + r.Value + " admits the initiator's whole subnet"
	}
	return ""
}

// connected reports whether c is a connection of this initiator.
func (in Initiator) connected(c Connection) bool {
	if in.IQN != "" && strings.EqualFold(c.Initiator, in.IQN) {
		return true
	}
	ip := net.ParseIP(c.Address)
	return ip != nil && in.Address != nil && ip.Equal(in.Address)
}

// access is what one target grants the initiator.
type access struct {
	owned  []Rule
	shared []string
	conns  []Connection
}

func (in Initiator) accessTo(t Target) access {
	var a access
	if t.OpenReason != "" {
		a.shared = append(a.shared, t.OpenReason)
	}
	for _, r := range t.Rules {
		if in.owns(r) {
			a.owned = append(a.owned, r)
		} else if why := in.shared(r); why != "" {
			a.shared = append(a.shared, why)
		}
	}
	for _, c := range t.Connections {
		if in.connected(c) {
			a.conns = append(a.conns, c)
		}
	}
	return a
}

// admitted reports whether the target lets the initiator log in.
func (a access) admitted() bool { return len(a.owned) > 0 || len(a.shared) > 0 }

// cut reports whether the initiator can neither log in nor still has a connection.
func (a access) cut() bool { return !a.admitted() && len(a.conns) == 0 }

// label names a target in messages and evidence.
func (t Target) label() string {
	if t.TPG > 0 {
		return fmt.Sprintf("%s tpgt %d", t.Name, t.TPG)
	}
	return t.Name + " (tid " + t.ID + ")"
}

// Sentinels a Backend wraps so the agent can sort its failures.
var (
	// ErrUnreachable: the storage server did not answer (tgtd down, configfs missing).
	ErrUnreachable = errors.New("storage server unreachable")
	// ErrNotFound: the rule, connection or target to remove is already gone. Removing
	// what is not there counts as done, which keeps Fence idempotent under races.
	ErrNotFound = errors.New("not found")
	// ErrBackendBroken: the backend cannot work here at all (tool missing).
	ErrBackendBroken = errors.New("backend unusable")
)

// classify turns a backend failure into a plugin error of the right kind. what says
// what the agent was doing, naming the target.
func classify(err error, what string) error {
	if err == nil {
		return nil
	}
	var pe *plugin.Error
	if errors.As(err, &pe) {
		return plugin.Errorf(pe.Kind, "%s: %s", what, pe.Message)
	}
	switch {
	case errors.Is(err, ErrUnreachable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return plugin.Errorf(plugin.KindTargetUnreachable, "%s: %v", what, err)
	case errors.Is(err, ErrBackendBroken):
		return plugin.Errorf(plugin.KindPermanent, "%s: %v", what, err)
	default:
		return plugin.Errorf(plugin.KindRetryable, "%s: %v", what, err)
	}
}
