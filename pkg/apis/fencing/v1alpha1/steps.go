package v1alpha1

// Timeline step types (Step.Type), in the order an incident meets them. They are stored
// in NodeFence status and read by people, tools and tests: a value never changes.

// Detection: the incident opens.
const (
	// StepEvidenceStarted: the bad evidence began (the last Lease renewal seen, Ready lost).
	StepEvidenceStarted = "EvidenceStarted"
	// StepDetected: the node stayed unhealthy past its threshold; the incident opened.
	StepDetected = "Detected"
	// StepRequested: a health checker's KubefenceRemediation opened the incident.
	StepRequested = "Requested"
)

// Decision: policy lets fencing start, or not yet.
const (
	// StepWait: policy says not yet (the policy's Wait verdict); the message says why.
	StepWait = "Wait"
	// StepHold: policy forbids fencing for now (the policy's Hold verdict: storm, budget, pause).
	StepHold = "Hold"
	// StepForced: the force annotation overrode a budget's hold or wait.
	StepForced = "Forced"
	// StepCancelled: the node showed a sign of life before fencing started, or the
	// KubefenceRemediation that asked was deleted or timed out; the incident ended.
	StepCancelled = "Cancelled"
	// StepFenceStarted: fencing started; the rate limit and the cooldown count from it.
	StepFenceStarted = "FenceStarted"
)

// Fencing: agents are called and their fence read back.
const (
	// StepLevelSkipped: an agent of the level is known to be down; its attempt failed uncalled.
	StepLevelSkipped = "LevelSkipped"
	// StepAgentCalled: a Fence call is about to be sent, written ahead with its target.
	StepAgentCalled = "AgentCalled"
	// StepAgentReturned: the Fence call returned; the state is read back next.
	StepAgentReturned = "AgentReturned"
	// StepAgentError: an agent call failed; the message names the method and error kind.
	StepAgentError = "AgentError"
	// StepStateReadBack: a state read back changed the attempt.
	StepStateReadBack = "StateReadBack"
	// StepVerified: a level was read back as fenced.
	StepVerified = "Verified"
	// StepFailed: every level failed; nothing was released.
	StepFailed = "Failed"
)

// Release: the fenced node's workloads go elsewhere.
const (
	// StepTaintAdded: a taint was added to the node (out-of-service, or kubefence's fenced taint).
	StepTaintAdded = "TaintAdded"
	// StepPodsDeleted: the node's pods were marked and force-deleted.
	StepPodsDeleted = "PodsDeleted"
	// StepVolumeAttachmentsDeleted: the node's VolumeAttachments were deleted.
	StepVolumeAttachmentsDeleted = "VolumeAttachmentsDeleted"
	// StepReplacementsLate: pods the release deleted whose names come back (a
	// StatefulSet's, and on a retry those an earlier attempt deleted) were not seen
	// recreated within the replacement wait; the out-of-service taint was added anyway
	// (the message names them).
	StepReplacementsLate = "ReplacementsLate"
	// StepReleaseFound: an earlier leader released the node after a verified fence and
	// was gone before it recorded it; the node's owner mark names this incident.
	StepReleaseFound = "ReleaseFound"
	// StepReleaseSkipped: the node rebooted before its release; nothing was released.
	StepReleaseSkipped = "ReleaseSkipped"
	// StepRemediated: the node's workloads were released.
	StepRemediated = "Remediated"
	// StepPoweredOn: for the Reboot action, an agent powered the node on after the release.
	StepPoweredOn = "PoweredOn"
	// StepLateReleaseRefused: pods bound after the release stay: the fence did not read back.
	StepLateReleaseRefused = "LateReleaseRefused"
	// StepLateRelease: pods bound after the release were released; the fence read back holding.
	StepLateRelease = "LateRelease"
)

// Recovery: the node is back, or contradicts its fence.
const (
	// StepContradiction: the node is Ready on the boot it had when verified fenced; nothing is undone.
	StepContradiction = "Contradiction"
	// StepContradictionCleared: the node came back with a new boot after all.
	StepContradictionCleared = "ContradictionCleared"
	// StepUnfenceCalled: an Unfence, or the Reboot action's power on, is about to be
	// sent to the target the fence went to; on record before the call, as a Fence is.
	StepUnfenceCalled = "UnfenceCalled"
	// StepUnfenceFailed: an Unfence (power on, storage restored) failed; the message has the state read after it.
	StepUnfenceFailed = "UnfenceFailed"
	// StepUnfenced: an agent undid its fence.
	StepUnfenced = "Unfenced"
	// StepUnfenceSkipped: the Reboot action's power on left an agent's fence in place (it
	// fences storage, not power); recovery undoes it on the node's new boot.
	StepUnfenceSkipped = "UnfenceSkipped"
	// StepTaintsRemoved: the taints kubefence had added were removed.
	StepTaintsRemoved = "TaintsRemoved"
	// StepRecovered: the node is back with a new boot; the incident closed.
	StepRecovered = "Recovered"
	// StepConfirmedOff: a person's confirm-off was accepted (the node's Lease, read live,
	// showed it silent); it stands in for a verified level.
	StepConfirmedOff = "ConfirmedOff"
	// StepCancelledByPerson: a person's cancel ended an incident that sent no fence. Not
	// a sign of life: the node gets no new automatic incident until it shows one.
	StepCancelledByPerson = "CancelledByPerson"
	// StepDecommissioned: a person's cancel closed the incident of a node whose Node
	// object is gone; whatever the incident did stays as it is.
	StepDecommissioned = "Decommissioned"
	// StepWordRefused: a person's confirm-off or cancel was refused, with why; the same
	// word (by and reason) is not considered again.
	StepWordRefused = "WordRefused"
	// StepFencePaused: a Fence call was due while fencing is paused; it is sent once the
	// pause ends.
	StepFencePaused = "FencePaused"
	// StepTakenUp: a leader other than the one that last wrote an open incident took it
	// up (a handover, an upgrade or a rollback): who, of which release, and from whom.
	StepTakenUp = "TakenUp"
)

// StepOrphanPrefix prefixes the release steps of a repair on a closed incident that
// left taints behind (OrphanTaintsRemoved).
const StepOrphanPrefix = "Orphan"
