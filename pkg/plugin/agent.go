package plugin

import "context"

// Action is what a Fence call asks of the target.
type Action string

const (
	// ActionOff powers the target off (or cuts it off) and leaves it so.
	ActionOff Action = "off"
	// ActionReboot powers the target off, verifies it is off, then powers it on again.
	ActionReboot Action = "reboot"
	// ActionOn powers the target on; used for recovery and by Unfence of power agents.
	ActionOn Action = "on"
)

// PowerState is what an agent read back from the target, never what it assumes.
type PowerState string

const (
	StateOn      PowerState = "on"
	StateOff     PowerState = "off"
	StateUnknown PowerState = "unknown"
)

// ParamType is the type of an agent parameter as Describe announces it.
type ParamType string

const (
	ParamString   ParamType = "string"
	ParamInt      ParamType = "int"
	ParamBool     ParamType = "bool"
	ParamDuration ParamType = "duration"
)

// Param describes one parameter an agent accepts.
type Param struct {
	Name        string
	Type        ParamType
	Description string
	// Secret parameters arrive in Request.Secrets, never in Request.Params.
	Secret   bool
	Required bool
	Default  string
}

// Description is what an agent says about itself.
type Description struct {
	Name    string
	Version string
	Actions []Action
	Params  []Param
}

// Request addresses one target. The deadline of every call is the context's deadline.
type Request struct {
	// Node is the Kubernetes node the target belongs to, for evidence and logs only.
	Node string
	// Target is what the agent acts on: a BMC address, an instance ID, an initiator IQN.
	Target string
	// Params are the non-secret parameters, already merged with the agent's defaults.
	Params map[string]string
	// Secrets hold credentials. They travel only inside request messages.
	Secrets map[string]string
	// Epoch is the fencing epoch of the leader that sends the request.
	Epoch int64
	// Restore is, on Unfence, the Evidence of the verified Fence being undone, so that
	// an agent restores exactly what it removed (storage ACLs) and nothing more.
	Restore string
	// Incident names the NodeFence the call is for; empty for a call outside any
	// incident (a target check). An agent may keep what it does per incident apart with
	// it: the NetworkFence agent trusts only a NetworkFence made for the incident asking.
	Incident string
	// ExpectIdentity is the identity the node reports for itself: its
	// status.nodeInfo.systemUUID for a BMC, the instance ID of its spec.providerID for
	// a cloud; empty when the node reports none. An agent that can read the device's
	// own identity compares the two before it sends anything and answers
	// KindTargetMismatch when they differ. Empty means "not checked", never a match.
	ExpectIdentity string
}

// Result is the outcome of a call, with what the agent observed.
type Result struct {
	State PowerState
	// Evidence says what the agent did and read back, in words a person can check.
	Evidence string
	// Identity is the device's own identity as the agent read it (a BMC's system GUID,
	// an instance ID); empty when the device cannot tell or was not asked.
	Identity string
}

// Agent is the contract every fence agent implements. Calls must be idempotent:
// fencing a target that is already fenced succeeds.
type Agent interface {
	Describe(ctx context.Context) (Description, error)
	Validate(ctx context.Context, params map[string]string) error
	Fence(ctx context.Context, req Request, action Action) (Result, error)
	Status(ctx context.Context, req Request) (Result, error)
	Unfence(ctx context.Context, req Request) (Result, error)
}
