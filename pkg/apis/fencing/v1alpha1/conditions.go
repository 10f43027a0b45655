package v1alpha1

// What a person reads of an incident (its conditions) and what a person may say to it
// (its annotations). The controller writes the conditions; the chart's admission
// policies decide who may set each annotation.

// ConditionContradiction is set on an incident whose node reports Ready with the same
// boot ID after it was verified fenced: either the agent's verification or the node's
// identity is wrong, and a person must look before anything is undone.
const ConditionContradiction = "FenceContradicted"

// The condition types of an incident (status.conditions), each answering one question a
// person asks of it. Each condition's observedGeneration is the incident's
// metadata.generation when it was set; its reason is one word (CamelCase) that alerts and
// people select on (a ConditionReason* constant, or a hold's own reason), its message the
// sentence that says why, as status.message does.
const (
	// ConditionFenced: has a fencing level been read back as complete? True once a level
	// is verified (status.verifiedLevel > 0), with reason Verified and the level and agents
	// in the message, or reason ConfirmedOff when a person's confirm-off stood in for the
	// read back (ConfirmOffAnnotation). False while no level is verified, with the reason
	// of the latest try (Fencing, a failed attempt's error kind, or FenceFailed once every
	// level failed). It never goes from True back to False within an incident.
	ConditionFenced = "Fenced"
	// ConditionReleased: were the node's workloads released? True once remediation is done
	// (the out-of-service taint added, VolumeAttachments and pods removed as the policy
	// says), with reason Remediated and what was released in the message. False with
	// reason NotFenced until then: nothing is ever released without Fenced True.
	ConditionReleased = "Released"
	// ConditionHeld: is the incident held by a rule rather than driven? True while the
	// phase is Held, with the rule as reason (the policy's hold reasons:
	// UnhealthyBudgetExceeded, ZonePartitioned, Paused, Excluded, TargetReadsOff,
	// Maintenance, Cooldown, ...) and in the message the evidence, the bound that holds it
	// and what would let it go on (for Maintenance: the signal and when the maintenance
	// window ends). False (reason NotHeld) once the incident goes on or ends; reason
	// Cancelled when a person ended it (CancelAnnotation).
	ConditionHeld = "Held"
	// ConditionRecovered: has the node come back from the fence? True when the node
	// reported a new boot ID and the incident closed (reason NewBoot), or a person closed
	// the incident of a node that is gone for good (reason Decommissioned,
	// CancelAnnotation). Absent until then.
	ConditionRecovered = "Recovered"
)

// ConfirmOffAnnotation, set on an open NodeFence with a reason as its value, is a
// person's word that the node is off (Pacemaker's stonith_admin --confirm): a whole
// chassis that lost power with its BMC, a machine pulled from the rack. The controller
// then treats the incident's fence as verified, but only after the usual checks that the
// node is silent (no Lease renewal, no status with its boot ID, since the incident
// opened), and records the person and the reason in the timeline. Setting it needs
// permission to create nodefences/confirm (SubresourceConfirm), which the chart's
// ValidatingAdmissionPolicy checks: the word releases the node's volumes to other nodes.
// The same change must set ConfirmOffByAnnotation to the person's user name.
const ConfirmOffAnnotation = "fencing.kubefence.io/confirm-off"

// ConfirmOffByAnnotation names the person who set ConfirmOffAnnotation: the chart's
// admission policy holds it to the user name of whoever sets or changes either, so that
// the timeline records who gave the word.
const ConfirmOffByAnnotation = "fencing.kubefence.io/confirm-off-by"

// CancelAnnotation, set on a NodeFence with a reason as its value, ends it without a
// fence: a held incident a person decided not to fence, or the open incident of a node
// that is gone for good (deleted, decommissioned), which then closes as recovered.
// Nothing that the incident released is taken back. Setting it needs permission to
// create nodefences/cancel (SubresourceCancel), which the chart's
// ValidatingAdmissionPolicy checks; the same change must set CancelByAnnotation to the
// person's user name.
const CancelAnnotation = "fencing.kubefence.io/cancel"

// CancelByAnnotation names the person who set CancelAnnotation, held to their user name
// by the chart's admission policy as ConfirmOffByAnnotation is.
const CancelByAnnotation = "fencing.kubefence.io/cancel-by"

// The virtual subresources the chart's admission policies ask the authorizer about: a
// role that may "create" one of them may set the matching annotation. No API serves them.
const (
	SubresourceForce   = "force"
	SubresourceConfirm = "confirm"
	SubresourceCancel  = "cancel"
)

// Reasons of the conditions, beside the hold reasons of the policies and the error kinds
// of failed attempts. A value never changes: alerts select on them.
const (
	// ConditionReasonVerified: Fenced True, a level was read back as complete.
	ConditionReasonVerified = "Verified"
	// ConditionReasonConfirmedOff: Fenced True on a person's confirm-off.
	ConditionReasonConfirmedOff = "ConfirmedOff"
	// ConditionReasonFencing: Fenced False while a level is being tried.
	ConditionReasonFencing = "Fencing"
	// ConditionReasonFenceFailed: Fenced False, every level failed.
	ConditionReasonFenceFailed = "FenceFailed"
	// ConditionReasonRemediated: Released True.
	ConditionReasonRemediated = "Remediated"
	// ConditionReasonNotFenced: Released False, no level verified yet.
	ConditionReasonNotFenced = "NotFenced"
	// ConditionReasonNotHeld: Held False, the incident goes on or ended.
	ConditionReasonNotHeld = "NotHeld"
	// ConditionReasonCancelled: Held False, a person cancelled the incident.
	ConditionReasonCancelled = "Cancelled"
	// ConditionReasonNewBoot: Recovered True, the node came back with a new boot ID.
	ConditionReasonNewBoot = "NewBoot"
	// ConditionReasonDecommissioned: Recovered True, a person closed the incident of a
	// node that is gone for good.
	ConditionReasonDecommissioned = "Decommissioned"
	// ConditionReasonMaintenance: Held True, the node is out on purpose (cordoned and
	// drained, being deleted, under maintenance); the message names the signal.
	ConditionReasonMaintenance = "Maintenance"
)

// ForceAnnotation, set to "true" on a NodeFence, makes the controller fence even where
// the disruption budget says hold or wait (storm, dark zone, cooldown, concurrency, rate).
// Pause, exclusion and dry run still apply. Setting it needs permission to create
// nodefences/force (SubresourceForce), which the chart's ValidatingAdmissionPolicy checks.
const ForceAnnotation = "fencing.kubefence.io/force"

// PauseLabel marks the pause ConfigMap (the controller's --pause-configmap, in its
// namespace; the chart's <release>-pause): each of its data entries is a pause request,
// its key the reason, its value who and why. While any request stands, no new fence is
// sent (see docs/safety-model.md); removing the last one resumes. The controller watches
// the ConfigMap, so a pause takes effect within one sync and restarts nothing.
const PauseLabel = "fencing.kubefence.io/pause"
