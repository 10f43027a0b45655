package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// Phase is where an incident stands.
type Phase string

const (
	// PhasePending: the incident exists, no agent has been called yet.
	PhasePending Phase = "Pending"
	// PhaseFencing: agents are being called and their result verified.
	PhaseFencing Phase = "Fencing"
	// PhaseFenced: a level was verified; the node can no longer run or reach storage.
	PhaseFenced Phase = "Fenced"
	// PhaseRemediated: the node's pods and volume attachments were released.
	PhaseRemediated Phase = "Remediated"
	// PhaseRecovered: the node came back with a new boot and the incident is closed.
	PhaseRecovered Phase = "Recovered"
	// PhaseHeld: policy forbids fencing for now (storm, budget, pause); see Status.Message.
	PhaseHeld Phase = "Held"
	// PhaseFailed: every level failed; a person must look. Nothing was released.
	PhaseFailed Phase = "Failed"
	// PhaseCancelled: the node recovered before any fence was verified; nothing was released.
	PhaseCancelled Phase = "Cancelled"
)

// Open reports whether an incident in this phase may still act on its node.
func (p Phase) Open() bool { return !slices.Contains(EndedPhases, p) }

// EndedPhases are the phases an incident ends in; the field selectors that read only
// open incidents (the controller's, the node agents') leave out these.
var EndedPhases = []Phase{PhaseRecovered, PhaseFailed, PhaseCancelled}

// PhaseNotIn is a field selector of the NodeFences whose status.phase is none of
// phases (status.phase is a selectable field of the CRD).
func PhaseNotIn(phases ...Phase) string {
	terms := make([]fields.Selector, 0, len(phases))
	for _, p := range phases {
		terms = append(terms, fields.OneTermNotEqualSelector("status.phase", string(p)))
	}
	return fields.AndSelectors(terms...).String()
}

// RequestedByController is spec.requestedBy on incidents the controller opened itself;
// any other value is a person's request.
const RequestedByController = "controller"

// NodeLabel names the node a NodeFence is about, on the NodeFence, and the node a
// controller replica runs on, on its identity Lease. Its value is LabelValue(the node's
// name): a node name may be longer than a label value.
const NodeLabel = "fencing.kubefence.io/node"

// NodeAnnotation holds, on a controller replica's identity Lease, the whole name of the
// node it runs on (NodeLabel holds at most 63 characters of it).
const NodeAnnotation = "fencing.kubefence.io/node"

// MaxTimelineSteps is the most steps an incident's timeline keeps: the first (why it
// opened) and the latest others. The CRD refuses a longer one.
const MaxTimelineSteps = 1000

// RetryAnnotation, set to "true" on a Failed NodeFence, lets the controller open a new
// automatic incident for its node. Without it, a node whose last incident failed gets no
// new automatic incident until it shows a sign of life or a new boot: the fence devices
// that failed are likely to fail again, and a person should look first.
const RetryAnnotation = "fencing.kubefence.io/retry"

// MaxFenceEvidence bounds an attempt's FenceEvidence (the CRD's MaxLength).
const MaxFenceEvidence = 32768

// TargetReadsOffAnnotation, on a Node, is the controller's mark of a node whose fence
// device read off while the node renewed its Lease after the read: the target mapping
// names another machine, and the node's fencing is held (the message says which agent and
// target). The controller removes it once the device reads on; a person may remove it, or
// force an incident past it (ForceAnnotation).
const TargetReadsOffAnnotation = "fencing.kubefence.io/target-reads-off"

// FenceAction is what fencing does to the node.
type FenceAction string

const (
	ActionOff    FenceAction = "Off"
	ActionReboot FenceAction = "Reboot"
)

// AttemptState is where one agent call stands.
type AttemptState string

const (
	// AttemptFencing: the Fence call was issued; its outcome is not recorded. After a
	// restart the call is re-issued, which agents make idempotent.
	AttemptFencing AttemptState = "Fencing"
	// AttemptVerifying: the agent reported success; the state is being read back.
	AttemptVerifying AttemptState = "Verifying"
	// AttemptVerified: the state was read back as fenced.
	AttemptVerified AttemptState = "Verified"
	// AttemptFailed: the call failed, or verification did not read fenced in time.
	AttemptFailed AttemptState = "Failed"
)

// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=nf
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Level",type=integer,JSONPath=`.status.attempts[-1:].level`,description="The last level tried"
// +kubebuilder:printcolumn:name="Verified",type=integer,JSONPath=`.status.verifiedLevel`,description="The level read back as fenced; empty until one is"
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.status.attempts[-1:].agent`,description="The agent of the last call"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.spec.reason`
// +kubebuilder:printcolumn:name="RequestedBy",type=string,JSONPath=`.spec.requestedBy`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1,description="Why the incident is where it is: held by which rule, failed on what"
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:selectablefield:JSONPath=`.status.phase`

// NodeFence is one fencing incident for one node, and its durable history.
type NodeFence struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeFenceSpec   `json:"spec"`
	Status NodeFenceStatus `json:"status,omitempty"`
}

// NodeFenceSpec says which node to fence and why. It cannot change once created: a
// different request is a new NodeFence.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: create a new NodeFence for a different request"
type NodeFenceSpec struct {
	// NodeName is the node to fence: a Node's name, a DNS subdomain.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	NodeName string `json:"nodeName"`
	// Reason is why fencing was requested, in words.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
	// RequestedBy is "controller" for automatic incidents, or the user name of the person
	// who created it; the chart's ValidatingAdmissionPolicy holds it to the requesting
	// user's name, so that nobody can claim to be someone else.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	RequestedBy string `json:"requestedBy,omitempty"`
	// Action overrides the policy's action.
	// +kubebuilder:validation:Enum=Off;Reboot
	// +optional
	Action FenceAction `json:"action,omitempty"`
}

// NodeFenceStatus is the incident's state and history, written only by the leader. An
// incident that ended (Recovered, Failed, Cancelled) keeps its phase, but for a person's
// word on a Failed one: Fenced with confirmedOff recorded, or Recovered (decommissioned).
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.phase) || !(oldSelf.phase in ['Recovered', 'Failed', 'Cancelled']) || (has(self.phase) && self.phase == oldSelf.phase) || (oldSelf.phase == 'Failed' && has(self.phase) && (self.phase == 'Recovered' || (self.phase == 'Fenced' && has(self.confirmedOff))))",message="an incident that ended (Recovered, Failed, Cancelled) keeps its phase; a Failed one moves only to Fenced on a person's confirm-off, or to Recovered"
type NodeFenceStatus struct {
	// Phase is where the incident stands.
	// +kubebuilder:validation:Enum=Pending;Fencing;Fenced;Remediated;Recovered;Held;Failed;Cancelled
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Epoch is the fencing epoch of the leader that last wrote this status. A leader with
	// a lower epoch must not write.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
	// Leader is the identity of the replica that last wrote this status.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Leader string `json:"leader,omitempty"`
	// Policy is the name of the policy that governs this incident.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Policy string `json:"policy,omitempty"`
	// Level is the fencing level being tried or verified, starting at 1.
	// +optional
	Level int32 `json:"level,omitempty"`
	// VerifiedLevel is the level whose fence was read back as complete; 0 until then.
	// Remediation never starts while it is 0 (safety invariant 1).
	// +optional
	VerifiedLevel int32 `json:"verifiedLevel,omitempty"`
	// BootID is the node's boot ID when the incident opened; a node that reports another
	// one has been power cycled.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	BootID string `json:"bootID,omitempty"`
	// LeaseRenewTime is the renewTime of the node's Lease (the kubelet's clock) when the
	// incident opened. A later renewTime is a sign of life from the node: an incident not
	// yet fencing is cancelled on it, by whichever replica leads; anything else, such as a
	// new leader's restarted clocks, leaves the recorded evidence standing.
	// +optional
	LeaseRenewTime *metav1.MicroTime `json:"leaseRenewTime,omitempty"`
	// ConfirmedOff records a person's word that the node is off (ConfirmOffAnnotation),
	// accepted after a live read of the node's Lease showed it silent: it stands in for a
	// verified level, so the node's workloads are released with no level read back.
	// +optional
	ConfirmedOff *PersonWord `json:"confirmedOff,omitempty"`
	// Attempts lists every agent call, oldest first.
	// +kubebuilder:validation:MaxItems=5000
	// +optional
	Attempts []Attempt `json:"attempts,omitempty"`
	// Remediation records what kubefence changed so that it can be undone exactly.
	// +optional
	Remediation Remediation `json:"remediation,omitempty"`
	// Timeline lists each step of the incident with its time: the first step and the
	// latest MaxTimelineSteps-1 others.
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	Timeline []Step `json:"timeline,omitempty"`
	// Message explains the phase, e.g. why it is held or failed.
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	Message string `json:"message,omitempty"`
	// ObservedGeneration is the metadata.generation the controller last acted on. The
	// spec never changes, so it reads 1 once the controller has taken the incident up;
	// 0 (absent) is an incident it has not seen yet.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions say what a person needs to know, one per type: Fenced (a level was read
	// back as complete, or a person confirmed the node off), Released (the node's
	// workloads were released), Held (a rule holds the incident; the reason names the
	// rule, the message the evidence and what would let it go on), Recovered (the node
	// came back with a new boot, or its incident was closed as gone for good) and
	// FenceContradicted (the node ran on after a verified fence).
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Attempt is one call of one agent at one level.
type Attempt struct {
	Level int32 `json:"level"`
	// +kubebuilder:validation:MaxLength=63
	Agent string `json:"agent"`
	// Try counts calls of this agent at this level, starting at 1.
	Try int32 `json:"try"`
	// +kubebuilder:validation:Enum=Fencing;Verifying;Verified;Failed
	State AttemptState `json:"state"`
	// Started is when the Fence call was issued.
	Started metav1.MicroTime `json:"started"`
	// Deadline is when the attempt fails if not verified.
	Deadline metav1.MicroTime `json:"deadline"`
	// Finished is when it was verified or failed.
	// +optional
	Finished *metav1.MicroTime `json:"finished,omitempty"`
	// Target is the device the Fence call went to (a BMC address, an instance ID, an
	// initiator IQN), resolved from the Node when the attempt was issued. Every later
	// call for this attempt (Status, Unfence, a re-issued Fence) goes to this target,
	// never to one resolved again: a mapping edited mid-incident must not make the
	// read-back look at another device than the one fenced. Empty for the watchdog level
	// and for a mapping that failed (the attempt then failed with it).
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Target string `json:"target,omitempty"`
	// FenceEvidence is what the agent's Fence calls for this attempt returned, kept apart
	// from Evidence, which every read back replaces: an Unfence restores exactly what it
	// says was removed (an iSCSI agent's "removed:" lines).
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	FenceEvidence string `json:"fenceEvidence,omitempty"`
	// PowerState is the last state the agent read back: on, off or unknown.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	PowerState string `json:"powerState,omitempty"`
	// Evidence is what the agent reported it did and read.
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	Evidence string `json:"evidence,omitempty"`
	// Error is why the attempt failed.
	// +kubebuilder:validation:MaxLength=32768
	// +optional
	Error string `json:"error,omitempty"`
	// ErrorKind is the agent's error class: Retryable, Permanent, TargetUnreachable,
	// Unsupported or AgentDied.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	ErrorKind string `json:"errorKind,omitempty"`
}

// Remediation records what was changed on the cluster for the fenced node.
type Remediation struct {
	// TaintsAdded lists the keys of the node taints kubefence added; only these are ever
	// removed on recovery.
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MaxLength=512
	// +optional
	TaintsAdded []string `json:"taintsAdded,omitempty"`
	// PodsDeleted lists namespace/name of pods kubefence force-deleted.
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MaxLength=512
	// +optional
	PodsDeleted []string `json:"podsDeleted,omitempty"`
	// VolumeAttachmentsDeleted lists the VolumeAttachments kubefence deleted.
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MaxLength=512
	// +optional
	VolumeAttachmentsDeleted []string `json:"volumeAttachmentsDeleted,omitempty"`
}

// Step is one entry of the incident's timeline.
type Step struct {
	Time metav1.MicroTime `json:"time"`
	// Type names the step, e.g. Detected, FenceStarted, Verified, TaintAdded.
	// +kubebuilder:validation:MaxLength=64
	Type string `json:"type"`
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message,omitempty"`
}

// +kubebuilder:object:root=true

// NodeFenceList is a list of NodeFence.
type NodeFenceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeFence `json:"items"`
}

// Verified reports whether a fencing level was read back as complete, or a person
// confirmed the node off (ConfirmedOff): the only ways to a release (safety invariant 1).
func (s *NodeFenceStatus) Verified() bool { return s.VerifiedLevel > 0 || s.ConfirmedOff != nil }

// PersonWord is what a person said to an incident through an annotation: who, why, and
// when the controller accepted it.
type PersonWord struct {
	// By is the user name of the person (the annotation's -by companion, held to the
	// user's name by the chart's admission policy).
	// +kubebuilder:validation:MaxLength=512
	By string `json:"by"`
	// Reason is the annotation's value.
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`
	// Time is when the controller accepted the word.
	Time metav1.MicroTime `json:"time"`
}

// LabelValue is v as a label value: v itself when it fits (63 characters), otherwise its
// first 54 characters and a hash of the whole, so that a node name of up to 253
// characters still labels its incident. Compare labels with LabelValue(name), not name.
func LabelValue(v string) string {
	if len(v) <= 63 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return strings.TrimRight(v[:54], ".-_") + "-" + hex.EncodeToString(sum[:4])
}
