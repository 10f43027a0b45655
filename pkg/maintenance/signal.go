package maintenance

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// Signals of planned absence kubefence reads on the Node itself.
const (
	// AutoscalerTaint is the taint the Cluster Autoscaler puts on a node it is about to
	// delete (scale down); its value is the Unix time it was added.
	AutoscalerTaint = "ToBeDeletedByClusterAutoscaler"
	// KarpenterTaint is the taint Karpenter (v1) puts on a node it has chosen to
	// disrupt (consolidate, expire, drift) before it drains and deletes it.
	KarpenterTaint = "karpenter.sh/disrupted"
	// ExcludeLabel is medik8s' label for a node that NodeHealthCheck must not remediate.
	ExcludeLabel = "remediation.medik8s.io/exclude-from-remediation"
	// KuredRebootAnnotation is the annotation kured (run with --annotate-nodes) puts on a
	// node while it cordons, drains and reboots it; its value is when that began. kured
	// removes it once the node is back and uncordoned. Its cluster-wide lock names one
	// node too, but on kured's own DaemonSet, which kubefence does not read.
	KuredRebootAnnotation = "weave.works/kured-reboot-in-progress"
)

// Objects are the other objects that say a node is under maintenance: names of the
// objects found, empty when none. Reader.Objects finds them.
type Objects struct {
	// DeletingMachine is namespace/name of a Cluster API Machine whose status.nodeRef
	// names the node and that has a deletionTimestamp.
	DeletingMachine string
	// NodeMaintenance is the name of a medik8s NodeMaintenance whose spec.nodeName names
	// the node.
	NodeMaintenance string
}

// Signal says why node is under maintenance, in words that name the signal, or "" when
// nothing says so. drained is true when the node has nothing left to release (no
// StatefulSet pod, no ReadWriteOnce volume attached); rule says whether a cordon counts,
// and when.
func Signal(node *corev1.Node, rule v1alpha1.CordonRule, drained bool, o Objects) string {
	switch {
	case o.NodeMaintenance != "":
		return fmt.Sprintf("NodeMaintenance %s (nodemaintenance.medik8s.io) names it", o.NodeMaintenance)
	case o.DeletingMachine != "":
		return fmt.Sprintf("its Cluster API Machine %s is being deleted", o.DeletingMachine)
	case hasTaint(node, AutoscalerTaint):
		return fmt.Sprintf("the Cluster Autoscaler is deleting it (taint %s)", AutoscalerTaint)
	case hasTaint(node, KarpenterTaint):
		return fmt.Sprintf("Karpenter is disrupting it (taint %s)", KarpenterTaint)
	case node.DeletionTimestamp != nil:
		return fmt.Sprintf("the Node is being deleted (since %s)", node.DeletionTimestamp.UTC().Format(time.RFC3339))
	}
	if since, ok := node.Annotations[KuredRebootAnnotation]; ok {
		return fmt.Sprintf("kured is rebooting it (annotation %s: %q)", KuredRebootAnnotation, since)
	}
	if _, ok := node.Labels[ExcludeLabel]; ok {
		return fmt.Sprintf("label %s", ExcludeLabel)
	}
	if !node.Spec.Unschedulable {
		return ""
	}
	switch {
	case rule == v1alpha1.CordonAlways:
		return "cordoned (spec.unschedulable)"
	case rule == v1alpha1.CordonWhenDrained && drained:
		return "cordoned (spec.unschedulable) and drained: nothing left to release"
	}
	return ""
}

func hasTaint(node *corev1.Node, key string) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// Holds says whether maintenance holds incident nf: the controller's own incidents and
// health checkers' requests, whose evidence is the node's silence. A person's request is
// not held: a person who asks for a node to be fenced (a drill on a drained node, a node
// known dead) has said what the signals only suggest.
func Holds(nf *v1alpha1.NodeFence) bool {
	by := nf.Spec.RequestedBy
	return by == v1alpha1.RequestedByController || strings.HasPrefix(by, v1alpha1.RequestedByRemediationPrefix)
}

// Earlier is the earlier of two times, a zero one counting as unknown.
func Earlier(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
