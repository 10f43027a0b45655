package v1alpha1

// Reasons of the Events the controller records on a Node and on its NodeFence, in the
// order an incident meets them. People and alerts select Events by them
// (--field-selector reason=FenceContradicted): a value never changes. A hold is reported
// with the policy's own reason (UnhealthyBudgetExceeded, Paused, ...).
const (
	// ReasonWouldFence: in dry run, the node would have been fenced; nothing was done.
	ReasonWouldFence = "WouldFence"
	// ReasonDetected: the node is unhealthy; an incident opened.
	ReasonDetected = "Detected"
	// ReasonCancelled: the node is alive; the incident ended before fencing.
	ReasonCancelled = "Cancelled"
	// ReasonFenceStarted: fencing of the node started.
	ReasonFenceStarted = "FenceStarted"
	// ReasonAgentDown: a level was skipped because its agent is down.
	ReasonAgentDown = "AgentDown"
	// ReasonFenced: a level was read back as fenced.
	ReasonFenced = "Fenced"
	// ReasonFenceFailed: every level failed; nothing was released.
	ReasonFenceFailed = "FenceFailed"
	// ReasonRemediated: the node's workloads were released.
	ReasonRemediated = "Remediated"
	// ReasonLateReleaseRefused: pods bound after the release stay: the fence did not read back.
	ReasonLateReleaseRefused = "LateReleaseRefused"
	// ReasonLateRelease: pods bound after the release were released.
	ReasonLateRelease = "LateRelease"
	// ReasonFenceContradicted: the node is Ready on the boot it had when verified fenced.
	ReasonFenceContradicted = "FenceContradicted"
	// ReasonRecovered: the node is back with a new boot; the incident closed.
	ReasonRecovered = "Recovered"
	// ReasonOrphanRepaired: taints a closed incident recorded but had not removed were removed.
	ReasonOrphanRepaired = "OrphanRepaired"
	// ReasonOrphanTaint: the node carries kubefence's taint with no incident behind it.
	ReasonOrphanTaint = "OrphanTaint"
	// ReasonTargetReadsOff: a node's fence device read off while the node renewed its
	// Lease; the mapping names another machine, and the node's fencing is held.
	ReasonTargetReadsOff = "TargetReadsOff"
	// ReasonTargetMismatch: a fence device's own identity (a BMC's system GUID, an
	// instance ID) is not the node's (systemUUID, providerID); nothing was sent to it, and
	// the incident is held until a person fixes the mapping.
	ReasonTargetMismatch = "TargetMismatch"
)
