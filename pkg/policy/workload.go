package policy

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// Threshold is how long a node's evidence must stay bad before it is unhealthy under p,
// starting from base (the configured detection threshold). Workloads can only shorten
// it, never below p.MinWait: a PodDisruptionBudget with no disruptions left shortens it
// to MinWait, and the smallest unreachable tolerationSeconds of the node's pods to that
// many seconds. A base already below MinWait is kept. The detector then raises whatever
// this returns to the node's evidence floor (detector.Floor): workloads may only choose
// among waits the evidence supports, never make a live node look dead sooner.
func Threshold(p *v1alpha1.Policy, node Node, base time.Duration) time.Duration {
	floor := min(p.MinWait.Duration, base)
	th := base
	if on(p.HonorDisruptionBudgets) && node.Workload.Urgent {
		th = floor
	}
	if on(p.HonorTolerations) && node.Workload.MinUnreachableToleration != nil {
		th = min(th, max(*node.Workload.MinUnreachableToleration, floor))
	}
	return th
}

// unreachableTaint is what the node lifecycle controller puts on a node it cannot reach.
var unreachableTaint = corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}

// ForNode describes node n with its workloads as policy p sees it: its labels, the
// smallest unreachable toleration among its pods, and whether a PodDisruptionBudget that
// allows no disruption now (pdbs) makes it urgent. The detector judges its health with
// the thresholds Threshold derives from it.
func ForNode(p *v1alpha1.Policy, n *corev1.Node, pods []*corev1.Pod, pdbs []*policyv1.PodDisruptionBudget) Node {
	pn := NewNode(p, n.Name, n.Labels)
	pn.Workload.MinUnreachableToleration = UnreachableToleration(pods)
	pn.Workload.Urgent, _ = Urgent(pods, pdbs)
	return pn
}

// UnreachableToleration is the smallest explicit tolerationSeconds with which a live pod
// of pods tolerates node.kubernetes.io/unreachable, or nil when none sets one. Pods that
// tolerate it forever (DaemonSets) or not at all say nothing about how long their authors
// forgive, so they do not count.
func UnreachableToleration(pods []*corev1.Pod) *time.Duration {
	var least *time.Duration
	for _, pod := range pods {
		if terminal(pod) {
			continue
		}
		for i := range pod.Spec.Tolerations {
			t := &pod.Spec.Tolerations[i]
			if t.TolerationSeconds == nil || !tolerates(t, &unreachableTaint) {
				continue
			}
			d := time.Duration(max(*t.TolerationSeconds, 0)) * time.Second
			if least == nil || d < *least {
				least = &d
			}
		}
	}
	return least
}

// Tolerates reports whether one of the pod's tolerations tolerates taint.
func Tolerates(pod *corev1.Pod, taint *corev1.Taint) bool {
	for i := range pod.Spec.Tolerations {
		if tolerates(&pod.Spec.Tolerations[i], taint) {
			return true
		}
	}
	return false
}

// tolerates is corev1.Toleration.ToleratesTaint without its logger and feature gates
// (which only add comparison operators for numeric values).
func tolerates(t *corev1.Toleration, taint *corev1.Taint) bool {
	if t.Effect != "" && t.Effect != taint.Effect {
		return false
	}
	if t.Key != "" && t.Key != taint.Key {
		return false
	}
	switch t.Operator {
	case "", corev1.TolerationOpEqual:
		return t.Value == taint.Value && t.Key != ""
	case corev1.TolerationOpExists:
		return true
	}
	return false
}

// Urgent reports whether a PodDisruptionBudget that allows no more disruptions guards a
// live pod of pods, and names the first such budget and pod.
func Urgent(pods []*corev1.Pod, pdbs []*policyv1.PodDisruptionBudget) (bool, string) {
	for _, pdb := range pdbs {
		if pdb.Status.DisruptionsAllowed > 0 || pdb.Spec.Selector == nil {
			continue
		}
		// In policy/v1 a nil selector matches no pod and an empty one every pod of the
		// namespace.
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			continue
		}
		for _, pod := range pods {
			if pod.Namespace == pdb.Namespace && !terminal(pod) && sel.Matches(labels.Set(pod.Labels)) {
				return true, pdb.Namespace + "/" + pdb.Name + " allows no disruption of " + pod.Name
			}
		}
	}
	return false, ""
}

// NothingToRelease reports whether fencing a node with these pods and this many
// ReadWriteOnce volume attachments would release nothing: no live pod of a StatefulSet.
// Pods of other controllers are recreated elsewhere without fencing once the node is
// unreachable; StatefulSet pods and RWO volumes wait for proof the node is off.
func NothingToRelease(pods []*corev1.Pod, rwoAttachments int) bool {
	if rwoAttachments > 0 {
		return false
	}
	for _, pod := range pods {
		if terminal(pod) {
			continue
		}
		if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "StatefulSet" {
			return false
		}
	}
	return true
}

func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}
