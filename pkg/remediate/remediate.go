package remediate

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

var (
	// ErrNotVerified: the incident has no verified fence; nothing may be released.
	ErrNotVerified = errors.New("fence not verified")
	// ErrNodeRebooted: the node reports another boot than when it was fenced.
	ErrNodeRebooted = errors.New("node booted again since the incident opened")
)

// OutOfServiceTaint is the taint that tells Kubernetes a node is shut down for good.
var OutOfServiceTaint = corev1.Taint{
	Key:    "node.kubernetes.io/out-of-service",
	Value:  "nodeshutdown",
	Effect: corev1.TaintEffectNoExecute,
}

// FencedTaint keeps the scheduler away from a fenced node while its pods are released:
// the node controller has usually not yet marked it unreachable, and a recreated pod
// must not land on a machine that is powered off. NoSchedule evicts nothing.
var FencedTaint = corev1.Taint{
	Key:    "fencing.kubefence.io/fenced",
	Value:  "true",
	Effect: corev1.TaintEffectNoSchedule,
}

// ConditionReason is the reason of the DisruptionTarget condition kubefence sets on pods.
const ConditionReason = "NodeFenced"

// Remediator changes the cluster on behalf of a verified incident.
type Remediator struct {
	Client kubernetes.Interface
	// OnStep, if set, is told of each action as it completes (for the timeline and events).
	OnStep func(step, message string)
	// Checkpoint, if set, persists the incident. It is called after a taint is recorded
	// in the Remediation and before it is put on the node, so that a crash in between
	// leaves a record of a taint kubefence owns, never a taint nobody owns.
	Checkpoint func(ctx context.Context) error
}

func (r *Remediator) step(step, msg string) {
	if r.OnStep != nil {
		r.OnStep(step, msg)
	}
}

// Release releases the workloads of the incident's node with the given strategy and
// records what it did in rem, which the caller persists. It is idempotent: a second call
// finds nothing left to do.
func (r *Remediator) Release(ctx context.Context, nf *v1alpha1.NodeFence, strategy v1alpha1.RemediationStrategy, rem *v1alpha1.Remediation) error {
	if !nf.Status.Verified() {
		return fmt.Errorf("release node %s: %w", nf.Spec.NodeName, ErrNotVerified)
	}
	node, err := r.Client.CoreV1().Nodes().Get(ctx, nf.Spec.NodeName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("release node %s: %w", nf.Spec.NodeName, err)
	}
	exists := err == nil
	if exists && nf.Status.BootID != "" && node.Status.NodeInfo.BootID != nf.Status.BootID {
		return fmt.Errorf("release node %s: %w (was %s, now %s)", node.Name, ErrNodeRebooted,
			nf.Status.BootID, node.Status.NodeInfo.BootID)
	}
	if strategy == v1alpha1.StrategyOutOfServiceTaint {
		if !exists {
			return nil
		}
		return r.addTaint(ctx, node.Name, OutOfServiceTaint, rem)
	}
	if exists {
		if err := r.addTaint(ctx, node.Name, FencedTaint, rem); err != nil {
			return err
		}
	}
	if err := r.deletePods(ctx, nf.Spec.NodeName, rem); err != nil {
		return err
	}
	if err := r.deleteVolumeAttachments(ctx, nf.Spec.NodeName, rem); err != nil {
		return err
	}
	// The out-of-service taint comes last: kube-controller-manager's taint eviction queues
	// pods by name, and a queued eviction of a pod deleted here would hit its replacement
	// of the same name on a healthy node.
	if strategy == v1alpha1.StrategyBoth && exists {
		return r.addTaint(ctx, node.Name, OutOfServiceTaint, rem)
	}
	return nil
}

func (r *Remediator) addTaint(ctx context.Context, nodeName string, taint corev1.Taint, rem *v1alpha1.Remediation) error {
	added := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := r.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		owned := slices.Contains(rem.TaintsAdded, taint.Key)
		if hasTaint(node, taint) {
			// Present and not recorded as ours: a person's taint, left alone (invariant 6).
			return nil
		}
		if !owned {
			rem.TaintsAdded = append(rem.TaintsAdded, taint.Key)
			if r.Checkpoint != nil {
				if err := r.Checkpoint(ctx); err != nil {
					rem.TaintsAdded = slices.DeleteFunc(rem.TaintsAdded, func(k string) bool { return k == taint.Key })
					return fmt.Errorf("record taint %s before adding it: %w", taint.Key, err)
				}
			}
		}
		node.Spec.Taints = append(node.Spec.Taints, taint)
		if _, err := r.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return err
		}
		added = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("add taint %s to node %s: %w", taint.Key, nodeName, err)
	}
	if added {
		r.step("TaintAdded", fmt.Sprintf("added %s=%s:%s", taint.Key, taint.Value, taint.Effect))
	}
	return nil
}

// RemoveTaints removes from the node the taints kubefence added, and no other.
func (r *Remediator) RemoveTaints(ctx context.Context, nodeName string, rem *v1alpha1.Remediation) error {
	if len(rem.TaintsAdded) == 0 {
		return nil
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := r.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n := len(node.Spec.Taints)
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool {
			return slices.Contains(rem.TaintsAdded, t.Key)
		})
		if len(node.Spec.Taints) == n {
			return nil
		}
		_, err = r.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("remove taints %v from node %s: %w", rem.TaintsAdded, nodeName, err)
	}
	r.step("TaintsRemoved", fmt.Sprintf("removed the taints kubefence had added: %v", rem.TaintsAdded))
	rem.TaintsAdded = nil
	return nil
}

func hasTaint(node *corev1.Node, taint corev1.Taint) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return sameTaint(t, taint) })
}

func sameTaint(a, b corev1.Taint) bool { return a.Key == b.Key && a.Effect == b.Effect }

// podsOn lists the pods bound to a node, straight from the API server: a stale cache
// must not hide a pod from release.
func podsOn(ctx context.Context, c kubernetes.Interface, nodeName string) ([]corev1.Pod, error) {
	list, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list pods on node %s: %w", nodeName, err)
	}
	return list.Items, nil
}
