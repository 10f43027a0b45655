package podrelease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/coalesce"
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

// Releaser changes the cluster on behalf of a verified incident.
type Releaser struct {
	Client kubernetes.Interface
	// OnStep, if set, is told of each action as it completes (for the timeline and events).
	OnStep func(step, message string)
	// Before, if set, is called before each change to the cluster (a taint, a pod
	// deletion, a VolumeAttachment deletion) with what it is about to do; an error stops
	// the release there. The caller checks its leader Lease in it (invariant 2: every
	// mutation follows a Lease check that passed within the renew deadline).
	Before func(ctx context.Context, action string) error
	// Attachments, if set, is the list of VolumeAttachments that releases running at
	// once share (SharedAttachments): the API server cannot select them by node, so each
	// release would otherwise list every attachment of the cluster. Each release still
	// gets a list sent after it asked, as fresh as one of its own.
	Attachments *coalesce.Read[[]storagev1.VolumeAttachment]
	// CachedAttachments, if set, returns every VolumeAttachment from the caller's
	// informer cache (shared, not to be changed). A release uses it instead of
	// Attachments when the out-of-service taint follows: an attachment the cache missed
	// is force-detached by kube-controller-manager's attach-detach controller once the
	// taint is on the node. Without the taint (strategy Direct) nothing else
	// would detach it, and the release reads them live.
	CachedAttachments func() []*storagev1.VolumeAttachment
	// Pods, if set, returns the pods bound to a node from the caller's informer cache
	// (shared, not to be changed); a release then deletes those instead of listing the
	// node's pods from the API server. A pod the cache does not show yet is not
	// released with the others: with the out-of-service taint kube-controller-manager's
	// PodGC deletes it, and without it the caller's late release does once the cache
	// shows it bound to the fenced node. Missing one costs time, never safety: every pod
	// released is released after the fence held.
	Pods func(node string) []*corev1.Pod
	// ReplacementWait bounds how long a release with the out-of-service taint (StrategyBoth)
	// waits for the StatefulSets' replacements of the pods it deleted before it adds the
	// taint (awaitReplacements); zero: no wait. DefaultReplacementWait in the controller.
	ReplacementWait time.Duration
	// Now, if set, is the clock the incident's timeline is written with; time.Now if nil.
	Now func() time.Time
	// Node, if set, returns a copy of the node from the caller's informer cache, if it
	// has the node. A release then starts from that copy instead of a read:
	// the first taint's update carries the copy's resourceVersion, so it only succeeds
	// while the copy is current, and the boot it was judged by is the node's.
	Node func(name string) (*corev1.Node, bool)
}

// Actions named to Before.
const (
	ActionTaint                  = "taint"
	ActionDeletePod              = "delete-pod"
	ActionDeleteVolumeAttachment = "delete-volume-attachment"
)

func (r *Releaser) before(ctx context.Context, action string) error {
	if r.Before == nil {
		return nil
	}
	return r.Before(ctx, action)
}

func (r *Releaser) step(step, msg string) {
	if r.OnStep != nil {
		r.OnStep(step, msg)
	}
}

// Release releases the workloads of the incident's node with the given strategy and
// records what it did in rem, which the caller persists. It is idempotent: a second call
// finds nothing left to do.
func (r *Releaser) Release(ctx context.Context, nf *v1alpha1.NodeFence, strategy v1alpha1.RemediationStrategy, rem *v1alpha1.Remediation) error {
	if !nf.Status.Verified() {
		return fmt.Errorf("release node %s: %w", nf.Spec.NodeName, ErrNotVerified)
	}
	node, live, err := r.node(ctx, nf.Spec.NodeName)
	if err != nil {
		return fmt.Errorf("release node %s: %w", nf.Spec.NodeName, err)
	}
	first := FencedTaint
	if strategy == v1alpha1.StrategyOutOfServiceTaint {
		first = OutOfServiceTaint
	}
	if node != nil && !live && hasTaint(node, first) {
		// No update of the first taint follows to catch a stale copy: read it live.
		if node, live, err = r.liveNode(ctx, nf.Spec.NodeName); err != nil {
			return fmt.Errorf("release node %s: %w", nf.Spec.NodeName, err)
		}
	}
	verify := func(n *corev1.Node) error { return sameBoot(nf, n) }
	if node != nil {
		if err := verify(node); err != nil {
			return err
		}
	}
	// No write of the incident comes before the first change: each taint carries its
	// owner on the node, in the same update (OwnerAnnotation), so a crash or a lost
	// leadership right after it leaves a taint that says whose it is; the release that
	// resumes, recovery and the orphan repair read it there (before, a status write between the
	// verified fence and the release recorded it).
	if node != nil {
		// From a cached copy, the update itself proves the copy current (it carries the
		// copy's resourceVersion): the boot judged above is the node's at the update. A
		// conflict reads the node again and judges its boot again.
		if node, err = r.addTaint(ctx, nf.Name, node, first, rem, verify); err != nil {
			return err
		}
	}
	if strategy == v1alpha1.StrategyOutOfServiceTaint {
		return nil
	}
	both := strategy == v1alpha1.StrategyBoth && node != nil
	var earlier []*corev1.Pod
	var earlierLeft time.Duration
	if both && !hasTaint(node, OutOfServiceTaint) {
		// Before this attempt deletes anything, so that only an earlier one's count.
		earlier, earlierLeft = r.deletedBefore(nf, rem)
	}
	reused, err := r.deletePods(ctx, nf.Spec.NodeName, rem)
	if err != nil {
		return err
	}
	if err := r.deleteVolumeAttachments(ctx, nf.Spec.NodeName, rem, both); err != nil {
		return err
	}
	// The out-of-service taint comes last, once the StatefulSets have recreated the pods
	// deleted here: kube-controller-manager's taint eviction deletes pods by name, and one
	// queued from a cache that still lists a pod deleted here would hit its replacement of
	// the same name on a healthy node (awaitReplacements).
	if both {
		wait := earlierLeft
		if len(reused) > 0 {
			wait = r.ReplacementWait
		}
		for _, p := range earlier {
			if !slices.ContainsFunc(reused, func(q *corev1.Pod) bool { return q.Namespace == p.Namespace && q.Name == p.Name }) {
				reused = append(reused, p)
			}
		}
		r.awaitReplacements(ctx, nf.Spec.NodeName, reused, wait)
		_, err := r.addTaint(ctx, nf.Name, node, OutOfServiceTaint, rem, nil)
		return err
	}
	return nil
}

// addTaint puts taint on the node for incident, starting from the given copy (live or
// cached) and reading the node again only on a conflict. The update that adds the taint
// also names the incident as its owner (OwnerAnnotation), and the record (rem) takes the
// key once the update is through. A taint already on the node is the incident's only if
// its record or the node's owner mark says so (a release before this one added it and
// its record was lost); anybody else's stays theirs and unrecorded (invariant 6). verify,
// if set, judges every copy read live. It returns the node as last written or read.
func (r *Releaser) addTaint(ctx context.Context, incident string, node *corev1.Node, taint corev1.Taint, rem *v1alpha1.Remediation,
	verify func(*corev1.Node) error) (*corev1.Node, error) {
	added := false
	current := node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if current == nil {
			n, err := r.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if verify != nil {
				if err := verify(n); err != nil {
					return err
				}
			}
			current = n
		}
		if hasTaint(current, taint) {
			if slices.Contains(Owned(current, incident), taint.Key) && !slices.Contains(rem.TaintsAdded, taint.Key) {
				rem.TaintsAdded = append(rem.TaintsAdded, taint.Key)
			}
			return nil
		}
		if err := r.before(ctx, ActionTaint); err != nil {
			return err
		}
		update := current.DeepCopy()
		update.Spec.Taints = append(update.Spec.Taints, taint)
		owned := ownedOnNode(current, incident, rem)
		if !slices.Contains(owned, taint.Key) {
			owned = append(owned, taint.Key)
		}
		setOwned(update, incident, owned)
		updated, err := r.Client.CoreV1().Nodes().Update(ctx, update, metav1.UpdateOptions{})
		if err != nil {
			current = nil
			return err
		}
		current, added = updated, true
		return nil
	})
	if errors.Is(err, ErrNodeRebooted) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("add taint %s to node %s: %w", taint.Key, node.Name, err)
	}
	if added {
		if !slices.Contains(rem.TaintsAdded, taint.Key) {
			rem.TaintsAdded = append(rem.TaintsAdded, taint.Key)
		}
		r.step(v1alpha1.StepTaintAdded, fmt.Sprintf("added %s=%s:%s", taint.Key, taint.Value, taint.Effect))
	}
	return current, nil
}

// node returns the node from the caller's cache (Node), or read live when the cache does
// not have it; nil when it does not exist. live reports which.
func (r *Releaser) node(ctx context.Context, name string) (*corev1.Node, bool, error) {
	if r.Node != nil {
		if n, ok := r.Node(name); ok {
			return n, false, nil
		}
	}
	return r.liveNode(ctx, name)
}

func (r *Releaser) liveNode(ctx context.Context, name string) (*corev1.Node, bool, error) {
	n, err := r.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, true, nil
	}
	return n, true, err
}

// sameBoot refuses a node that booted again since nf was opened: it came back, and
// what ran on it may run again.
func sameBoot(nf *v1alpha1.NodeFence, n *corev1.Node) error {
	if nf.Status.BootID != "" && n.Status.NodeInfo.BootID != nf.Status.BootID {
		return fmt.Errorf("release node %s: %w (was %s, now %s)", n.Name, ErrNodeRebooted, nf.Status.BootID, n.Status.NodeInfo.BootID)
	}
	return nil
}

// RemoveTaints removes from the node the taints incident added, and no other, with its
// owner mark, and clears the record. The taints it added are those its record names and
// those the node's owner mark gives it (a release whose record was lost after the
// update). It returns the keys it found on the node and removed: none when a person or
// an earlier try already removed them, and then the step says so rather than claim a
// removal.
func (r *Releaser) RemoveTaints(ctx context.Context, incident, nodeName string, rem *v1alpha1.Remediation) ([]string, error) {
	var removed, ours []string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		removed = nil
		node, err := r.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		marked := Owned(node, incident)
		ours = append(slices.Clone(rem.TaintsAdded), marked...)
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool {
			if !slices.Contains(ours, t.Key) {
				return false
			}
			removed = append(removed, t.Key)
			return true
		})
		if len(removed) == 0 && len(marked) == 0 {
			return nil
		}
		if len(marked) > 0 {
			setOwned(node, incident, nil)
		}
		if err := r.before(ctx, ActionTaint); err != nil {
			return err
		}
		_, err = r.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("remove the taints of incident %s (recorded %v) from node %s: %w", incident, rem.TaintsAdded, nodeName, err)
	}
	slices.Sort(ours)
	ours = slices.Compact(ours)
	switch {
	case len(ours) == 0:
	case len(removed) == 0:
		r.step(v1alpha1.StepTaintsRemoved, fmt.Sprintf("the taints kubefence had added, %v, were no longer on the node; record cleared", ours))
	default:
		r.step(v1alpha1.StepTaintsRemoved, fmt.Sprintf("removed the taints kubefence had added: %v", removed))
	}
	rem.TaintsAdded = nil
	return removed, nil
}

func hasTaint(node *corev1.Node, taint corev1.Taint) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return sameTaint(t, taint) })
}

func sameTaint(a, b corev1.Taint) bool { return a.Key == b.Key && a.Effect == b.Effect }

// podsOn returns the pods bound to a node: from the cache when Pods is set, else
// listed from the API server.
func (r *Releaser) podsOn(ctx context.Context, nodeName string) ([]*corev1.Pod, error) {
	if r.Pods != nil {
		return r.Pods(nodeName), nil
	}
	list, err := r.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list pods on node %s: %w", nodeName, err)
	}
	out := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}
