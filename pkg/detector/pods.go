package detector

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodConditionNodeUnreachable is the condition kubefence sets on the pods of a node it
// cannot reach, as the pod-safety proposal asks, so users and tools see why they are stuck.
const PodConditionNodeUnreachable corev1.PodConditionType = "fencing.kubefence.io/NodeUnreachable"

// ReasonNodeReachable is the condition's reason once the node is back.
const ReasonNodeReachable = "NodeReachable"

// Unreachable reports whether the observation means the node's pods are cut off: it is
// unhealthy, flapping while its evidence says unhealthy, or deleted.
func (o Observation) Unreachable() bool {
	return o.Damping.Undamped == Unhealthy || o.Health == Deleted
}

// PodCondition is the NodeUnreachable condition for the pods of the observed node at
// now: True with the evidence while the node is unreachable, False once it is not.
func PodCondition(obs Observation, now time.Time) corev1.PodCondition {
	c := corev1.PodCondition{Type: PodConditionNodeUnreachable, LastTransitionTime: metav1.NewTime(now)}
	if !obs.Unreachable() {
		c.Status, c.Reason = corev1.ConditionFalse, ReasonNodeReachable
		c.Message = fmt.Sprintf("node %s is reachable again", obs.Node)
		return c
	}
	c.Status, c.Reason = corev1.ConditionTrue, obs.Reason
	since := ""
	if !obs.Since.IsZero() {
		since = " since " + obs.Since.UTC().Format(time.RFC3339)
	}
	// The message stays the same while the episode lasts, so that re-applying it writes
	// nothing; the changing details belong to events and the NodeFence.
	c.Message = fmt.Sprintf("node %s unreachable%s (%s). The pod's processes may still run; it is released only "+
		"once the node is fenced (verified off or cut off from its storage) or back", obs.Node, since, obs.Reason)
	return c
}

// SetPodCondition puts c into conds the way the kubelet does: the transition time moves
// only when the status changes. A False condition is not added to a pod that never had
// the condition. It returns the new slice and whether anything changed; conds itself is
// not modified, so a cached pod's status can be passed in.
func SetPodCondition(conds []corev1.PodCondition, c corev1.PodCondition) ([]corev1.PodCondition, bool) {
	for i := range conds {
		if conds[i].Type != c.Type {
			continue
		}
		old := conds[i]
		if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			return conds, false
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		out := append([]corev1.PodCondition(nil), conds...)
		out[i] = c
		return out, true
	}
	if c.Status != corev1.ConditionTrue {
		return conds, false
	}
	return append(append([]corev1.PodCondition(nil), conds...), c), true
}

// TrimForCache drops what kubefence never reads from objects before an informer caches
// them: managedFields on every object (often the largest part of a small one) and a
// node's status.images (dozens of image names per node). Use it as the informers'
// transform (SharedIndexInformer.SetTransform), which cuts the caches of a 5,000-node,
// 50,000-pod cluster by about a third (see BenchmarkDetectorMemory). Objects from such a
// cache may be used for Update, since the API server keeps managedFields that are not
// sent, but not for UpdateStatus of a Node.
func TrimForCache(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	if n, ok := obj.(*corev1.Node); ok {
		n.Status.Images = nil
	}
	return obj, nil
}
