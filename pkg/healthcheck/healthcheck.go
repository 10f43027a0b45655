package healthcheck

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// ClusterAPIGroup is Cluster API's group: a request owned by one of its Machines comes
// from a MachineHealthCheck.
const ClusterAPIGroup = "cluster.x-k8s.io"

// Target is where a request's node comes from.
type Target struct {
	// Node is the node's name; empty when Machine names it.
	Node string
	// Machine is the owning Cluster API Machine, whose status.nodeRef names the node.
	Machine *MachineRef
}

// MachineRef is a Machine as an owner reference names it.
type MachineRef struct {
	GroupVersion    schema.GroupVersion
	Namespace, Name string
}

// Resource is the Machine's resource, at the version its owner reference names.
func (m MachineRef) Resource() schema.GroupVersionResource {
	return m.GroupVersion.WithResource("machines")
}

func (m MachineRef) String() string { return "Machine " + m.Namespace + "/" + m.Name }

// TargetOf is where r's node comes from: NodeHealthCheck's annotation, else the owning
// Machine (MachineHealthCheck), else r's name (NodeHealthCheck before the annotation).
func TargetOf(r *v1alpha1.KubefenceRemediation) Target {
	if n := r.Annotations[v1alpha1.RemediationNodeNameAnnotation]; n != "" {
		return Target{Node: n}
	}
	if m := owningMachine(r); m != nil {
		return Target{Machine: m}
	}
	return Target{Node: r.Name}
}

func owningMachine(r *v1alpha1.KubefenceRemediation) *MachineRef {
	for _, o := range r.OwnerReferences {
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		if err == nil && o.Kind == "Machine" && gv.Group == ClusterAPIGroup {
			return &MachineRef{GroupVersion: gv, Namespace: r.Namespace, Name: o.Name}
		}
	}
	return nil
}

// MachineNode is the node a Cluster API Machine runs as: its status.nodeRef.name, in
// v1beta1 (an ObjectReference) and v1beta2 (a MachineNodeReference) alike.
func MachineNode(m MachineRef, u *unstructured.Unstructured) (string, error) {
	name, _, err := unstructured.NestedString(u.Object, "status", "nodeRef", "name")
	if err != nil {
		return "", fmt.Errorf("%s: status.nodeRef.name: %w", m, err)
	}
	if name == "" {
		return "", fmt.Errorf("%s has no status.nodeRef: it has no node to fence", m)
	}
	return name, nil
}

// Caller names who made r, from its owners: a NodeHealthCheck, a Machine's
// MachineHealthCheck, or, with neither, the request itself.
func Caller(r *v1alpha1.KubefenceRemediation) string {
	for _, o := range r.OwnerReferences {
		if o.Kind == "NodeHealthCheck" {
			return "NodeHealthCheck " + o.Name
		}
	}
	if m := owningMachine(r); m != nil {
		return "MachineHealthCheck of " + m.String()
	}
	return "KubefenceRemediation " + r.Namespace + "/" + r.Name
}

// maxRequestedBy is NodeFence spec.requestedBy's MaxLength.
const maxRequestedBy = 512

// RequestedBy is spec.requestedBy of the NodeFence opened for r: the prefix only the
// controller may write, the caller and the request.
func RequestedBy(r *v1alpha1.KubefenceRemediation) string {
	s := fmt.Sprintf("%s%s (KubefenceRemediation %s/%s)", v1alpha1.RequestedByRemediationPrefix, Caller(r), r.Namespace, r.Name)
	if len(s) > maxRequestedBy {
		s = s[:maxRequestedBy]
	}
	return s
}

// Key is r's namespace/name, as RemediationAnnotation holds it.
func Key(r *v1alpha1.KubefenceRemediation) string { return r.Namespace + "/" + r.Name }

// NodeFenceName is the name of the NodeFence opened for the request with this UID on
// node: one name per request, so that a create repeated after a crash finds the first.
func NodeFenceName(node string, uid types.UID) string {
	suffix := "-kfr-" + strings.ReplaceAll(string(uid), "-", "")
	if len(suffix) > 13 {
		suffix = suffix[:13]
	}
	const maxName = 253
	if len(node)+len(suffix) > maxName {
		node = strings.TrimRight(node[:maxName-len(suffix)], ".-")
	}
	return node + suffix
}

// Request is the NodeFence that carries r for node.
func Request(r *v1alpha1.KubefenceRemediation, node string) *v1alpha1.NodeFence {
	return &v1alpha1.NodeFence{
		ObjectMeta: metav1.ObjectMeta{
			Name:        NodeFenceName(node, r.UID),
			Labels:      map[string]string{v1alpha1.NodeLabel: v1alpha1.LabelValue(node), v1alpha1.RemediationUIDLabel: string(r.UID)},
			Annotations: map[string]string{v1alpha1.RemediationAnnotation: Key(r)},
		},
		Spec: v1alpha1.NodeFenceSpec{
			NodeName: node, RequestedBy: RequestedBy(r), Action: r.Spec.Action,
			Reason: fmt.Sprintf("%s asked to remediate the node", Caller(r)),
		},
	}
}

// Carries reports whether nf was opened for r (rather than adopted by it).
func Carries(nf *v1alpha1.NodeFence, r *v1alpha1.KubefenceRemediation) bool {
	return nf.Labels[v1alpha1.RemediationUIDLabel] == string(r.UID)
}

// Withdrawn says why the request a NodeFence was opened for no longer stands: r is that
// request as read now (nil when it is gone) and uid the one the NodeFence was opened for.
// "" while it stands.
func Withdrawn(r *v1alpha1.KubefenceRemediation, uid string) string {
	switch {
	case r == nil:
		return "its KubefenceRemediation was deleted"
	case string(r.UID) != uid:
		return "its KubefenceRemediation was deleted (another of the same name replaced it)"
	case r.DeletionTimestamp != nil:
		return "its KubefenceRemediation is being deleted"
	case r.Annotations[v1alpha1.RemediationTimedOutAnnotation] != "":
		return "its health checker timed out (" + v1alpha1.RemediationTimedOutAnnotation + ")"
	}
	return ""
}

// Problem is why a request cannot be carried at all: its node or policy is missing.
type Problem struct{ Reason, Message string }

// maxText is the status text fields' MaxLength.
const maxText = 32768

// Mirror is r's status with node and nf (nil while none carries r), or with the problem
// that stops it: the conditions NodeHealthCheck reads, and the incident's phase,
// message and last evidence.
func Mirror(r *v1alpha1.KubefenceRemediation, node string, nf *v1alpha1.NodeFence, problem *Problem) v1alpha1.KubefenceRemediationStatus {
	st := *r.Status.DeepCopy()
	st.NodeName = node
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		if len(msg) > maxText {
			msg = msg[:maxText]
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
			Message: msg, ObservedGeneration: r.Generation})
	}
	progress := func(processing bool, succeeded metav1.ConditionStatus, reason, msg string) {
		p := metav1.ConditionFalse
		if processing {
			p = metav1.ConditionTrue
		}
		set(v1alpha1.ConditionProcessing, p, reason, msg)
		set(v1alpha1.ConditionSucceeded, succeeded, reason, msg)
	}
	set(v1alpha1.ConditionPermanentNodeDeletionExpected, metav1.ConditionFalse, "NodeKept", "kubefence never deletes the Node")
	timedOut := r.Annotations[v1alpha1.RemediationTimedOutAnnotation] != ""
	switch {
	case problem != nil:
		st.Phase, st.Message = "", problem.Message
		progress(false, metav1.ConditionFalse, problem.Reason, problem.Message)
	case nf == nil && timedOut:
		st.Message = "timed out before kubefence opened an incident"
		progress(false, metav1.ConditionFalse, "TimedOut", st.Message)
	case nf == nil:
		st.Message = "opening an incident"
		progress(true, metav1.ConditionUnknown, "Opening", st.Message)
	default:
		st.NodeFence, st.Phase, st.Message = nf.Name, nf.Status.Phase, nf.Status.Message
		if n := len(nf.Status.Attempts); n > 0 {
			st.Evidence = nf.Status.Attempts[n-1].Evidence
		}
		mirrorPhase(nf, timedOut, progress)
	}
	if len(st.Message) > maxText {
		st.Message = st.Message[:maxText]
	}
	return st
}

func mirrorPhase(nf *v1alpha1.NodeFence, timedOut bool, progress func(bool, metav1.ConditionStatus, string, string)) {
	phase := nf.Status.Phase
	if phase == "" {
		phase = v1alpha1.PhasePending
	}
	reason := string(phase)
	switch {
	case (phase == v1alpha1.PhaseRemediated || (phase == v1alpha1.PhaseRecovered && nf.Status.Verified())) && releaseSkipped(nf):
		// The fence held and the node came back on a new boot before its workloads were
		// released: nothing was released, and its pods restart with it.
		progress(false, metav1.ConditionTrue, ReasonRebootedBeforeRelease, fmt.Sprintf(
			"node %s verified fenced at level %d; it booted again before its workloads were released, so nothing was released (NodeFence %s)",
			nf.Spec.NodeName, nf.Status.VerifiedLevel, nf.Name))
	case phase == v1alpha1.PhaseRemediated || (phase == v1alpha1.PhaseRecovered && nf.Status.Verified()):
		progress(false, metav1.ConditionTrue, reason, fmt.Sprintf(
			"node %s verified fenced at level %d and its workloads released (NodeFence %s)", nf.Spec.NodeName, nf.Status.VerifiedLevel, nf.Name))
	case !phase.Open():
		if timedOut && phase == v1alpha1.PhaseCancelled {
			reason = "TimedOut"
		}
		progress(false, metav1.ConditionFalse, reason, fmt.Sprintf("NodeFence %s ended %s: %s", nf.Name, phase, nf.Status.Message))
	case timedOut && len(nf.Status.Attempts) > 0:
		progress(true, metav1.ConditionUnknown, reason, fmt.Sprintf(
			"timed out while fencing: NodeFence %s finishes and verifies the fence under way (%s)", nf.Name, phase))
	default:
		progress(true, metav1.ConditionUnknown, reason, fmt.Sprintf("NodeFence %s is %s: %s", nf.Name, phase, nf.Status.Message))
	}
}

// ReasonRebootedBeforeRelease is the conditions' reason for an incident whose node booted
// again after its fence held and before its release: done, with nothing released.
const ReasonRebootedBeforeRelease = "RebootedBeforeRelease"

// releaseSkipped reports whether nf's release was skipped: the node booted again first.
func releaseSkipped(nf *v1alpha1.NodeFence) bool {
	return slices.ContainsFunc(nf.Status.Timeline, func(s v1alpha1.Step) bool { return s.Type == v1alpha1.StepReleaseSkipped })
}
