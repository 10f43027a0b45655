package podrelease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// DefaultReplacementWait is how long a release waits for the StatefulSets' replacements of
// the pods it deleted before it adds the out-of-service taint (Releaser.ReplacementWait).
const DefaultReplacementWait = 2 * time.Second

// replacementPoll is how often the wait reads the pods' names.
const replacementPoll = 50 * time.Millisecond

// reusesName reports whether pod's controller is a StatefulSet, which recreates it under
// the same name.
func reusesName(pod *corev1.Pod) bool { return controlledBy(pod, "StatefulSet") }

// releaseOrder is the order a release deletes a node's pods in: first those a
// replacement waits on, a StatefulSet's (recreated only once this one is gone) and any
// with a PersistentVolumeClaim (its volume follows); then the others; the DaemonSets'
// last (theirs come back on this node only). The pods are the same, and each deletion
// still follows its own Lease check: only the replacements that matter start sooner.
func releaseOrder(pods []*corev1.Pod) []*corev1.Pod {
	rank := func(p *corev1.Pod) int {
		switch {
		case reusesName(p) || slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.PersistentVolumeClaim != nil }):
			return 0
		case controlledBy(p, "DaemonSet"):
			return 2
		}
		return 1
	}
	out := slices.Clone(pods)
	slices.SortStableFunc(out, func(a, b *corev1.Pod) int { return rank(a) - rank(b) })
	return out
}

// controlledBy reports whether pod's controller is an apps/v1 object of kind.
func controlledBy(pod *corev1.Pod, kind string) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.Kind == kind && ref.APIVersion == "apps/v1"
}

// awaitReplacements waits, up to wait (ReplacementWait), until each StatefulSet pod this release
// deleted has been recreated under its name (a pod of that name with another UID), before
// the out-of-service taint is added. kube-controller-manager's taint eviction, when the
// taint lands, queues each pod its cache lists on the node and later gets and deletes it
// by name, with no UID (pkg/controller/tainteviction, addConditionAndDeletePod); its cache
// can still list a pod deleted here, and by the time it acts the name belongs to the
// replacement on a healthy node (it happened on real nodes). The StatefulSet controller
// shares that cache and recreates the pod only once the cache has dropped it: a
// replacement is proof that the eviction will not find the old pod when the taint comes.
// Leaving the pods to the eviction instead is no cure: it deletes them gracefully, and
// PodGC force-deletes such terminating pods of an out-of-service node by name too. Past
// the wait (a StatefulSet scaled down, or its controller behind), the release goes on
// and logs the names it did not see come back, and puts them on the incident's timeline
// (StepReplacementsLate).
//
// A pod counts as recreated when a pod of its name exists that is not bound to the fenced
// node and, when the deleted pod's UID is known, has another UID.
func (r *Releaser) awaitReplacements(ctx context.Context, node string, deleted []*corev1.Pod, wait time.Duration) {
	if wait <= 0 || len(deleted) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(replacementPoll)
	defer tick.Stop()
	pending := deleted
	for {
		var still []*corev1.Pod
		for _, p := range pending {
			now, err := r.Client.CoreV1().Pods(p.Namespace).Get(wctx, p.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err != nil && wctx.Err() == nil) || (err == nil && (now.UID == p.UID || now.Spec.NodeName == node)) {
				still = append(still, p)
			}
		}
		if pending = still; len(pending) == 0 {
			return
		}
		select {
		case <-wctx.Done():
			if ctx.Err() == nil {
				names := make([]string, len(pending))
				for i, p := range pending {
					names[i] = p.Namespace + "/" + p.Name
					if p.UID == "" {
						names[i] += " (deleted by an earlier attempt, its owner not recorded)"
					}
				}
				klog.FromContext(ctx).Info("Pods not recreated in time; adding the out-of-service taint anyway",
					"pods", names, "waited", wait)
				r.step(v1alpha1.StepReplacementsLate, fmt.Sprintf("not recreated within %s, the out-of-service taint added anyway: %s",
					wait.Round(time.Millisecond), strings.Join(names, ", ")))
			}
			return
		case <-tick.C:
		}
	}
}

// deletedBefore lists the pods earlier attempts of this release deleted (rem.PodsDeleted,
// read before this attempt deletes any), and how much of ReplacementWait is left since
// the latest of those deletions (the timeline's latest PodsDeleted step); none once it has
// passed. A release that failed after deleting pods
// (a VolumeAttachment deletion refused, a Lease check failed) and is tried again at once
// finds none of them left on the node, yet kube-controller-manager's cache may still list
// them, and its taint eviction would delete their replacements by name. Their UIDs are
// not recorded: a pod of the name not bound to the fenced node is the replacement; nor
// are their owners, so a pod whose name no controller reuses is waited for until the
// window ends, never longer than the first attempt would have.
func (r *Releaser) deletedBefore(nf *v1alpha1.NodeFence, rem *v1alpha1.Remediation) ([]*corev1.Pod, time.Duration) {
	if r.ReplacementWait <= 0 || len(rem.PodsDeleted) == 0 {
		return nil, 0
	}
	var at time.Time
	for _, s := range nf.Status.Timeline {
		if s.Type == v1alpha1.StepPodsDeleted && s.Time.After(at) {
			at = s.Time.Time
		}
	}
	clock := r.Now
	if clock == nil {
		clock = time.Now
	}
	left := r.ReplacementWait - clock().Sub(at)
	if at.IsZero() || left <= 0 {
		return nil, 0
	}
	var earlier []*corev1.Pod
	for _, key := range rem.PodsDeleted {
		if ns, name, ok := strings.Cut(key, "/"); ok {
			earlier = append(earlier, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		}
	}
	return earlier, left
}
