package plugin

import (
	"errors"
	"fmt"
	"strings"
)

// ErrorKind classifies an agent failure so the controller knows what to do next.
type ErrorKind string

const (
	// KindRetryable: try the same agent again after a backoff (BMC busy, throttled).
	KindRetryable ErrorKind = "Retryable"
	// KindPermanent: retrying will not help (wrong password, unknown instance).
	KindPermanent ErrorKind = "Permanent"
	// KindTargetUnreachable: the agent could not reach the target (timeout, refused).
	KindTargetUnreachable ErrorKind = "TargetUnreachable"
	// KindUnsupported: the agent does not implement the action or method.
	KindUnsupported ErrorKind = "Unsupported"
	// KindNotVerified: the device accepted the action, but reading it back disagrees
	// (still on after the wait). Retried like Retryable, reported apart.
	KindNotVerified ErrorKind = "NotVerified"
	// KindTargetMismatch: the device's own identity (a system GUID, an instance ID) is
	// not the one the node reports; nothing was sent. Retrying or another level through
	// the same mapping would not help: the mapping is wrong and a person must fix it.
	KindTargetMismatch ErrorKind = "TargetMismatch"
)

// Kinds the controller and the fencer record of a call or an attempt; no agent returns
// them, and KindOf never does.
const (
	// KindAgentDied: the agent process or connection went away during the call (ErrAgentDied).
	KindAgentDied ErrorKind = "AgentDied"
	// KindAgentDown: the attempt was skipped, uncalled: the agent failed its health checks.
	KindAgentDown ErrorKind = "AgentDown"
	// KindTimeout: the call did not answer by its deadline, or the attempt was not verified by its own.
	KindTimeout ErrorKind = "Timeout"
	// KindUnknown: a Fence call timed out and no state was read back since: whether it landed is unknown.
	KindUnknown ErrorKind = "Unknown"
)

// ErrAgentDied means the agent process (or remote agent connection) went away during
// or before the call. It says nothing about the target: the fence may or may not have
// happened, so the caller re-issues the idempotent call on a restarted agent.
var ErrAgentDied = errors.New("agent process died")

// Error is an agent failure of a known kind. It crosses the gRPC boundary intact.
type Error struct {
	Kind    ErrorKind
	Message string
	// Params are the parameters a Validate (or a call) refused, each by name, so that
	// the controller reports each at its place in the configuration
	// (agents[0].params.cipherSuite). Empty for any other failure.
	Params []ParamError
}

// ParamError is one parameter an agent refuses: its name and why, without the name.
type ParamError struct {
	Name   string
	Detail string
}

// InvalidParams is the Permanent error that refuses each of problems: a bad parameter
// does not get better by retrying. Its message names every one, one per line.
func InvalidParams(problems []ParamError) error {
	lines := make([]string, len(problems))
	for i, p := range problems {
		lines[i] = p.Name + ": " + p.Detail
	}
	return &Error{Kind: KindPermanent, Message: "invalid parameters: " + strings.Join(lines, "\n"), Params: problems}
}

// ParamErrors returns the parameters err refuses by name; nil when it names none.
func ParamErrors(err error) []ParamError {
	var e *Error
	if errors.As(err, &e) {
		return e.Params
	}
	return nil
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Kind, e.Message) }

// Errorf returns an *Error of the given kind.
func Errorf(kind ErrorKind, format string, args ...any) error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// KindOf reports the kind of err; errors of no known kind count as retryable,
// the one choice that neither gives up early nor claims success.
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindRetryable
}
