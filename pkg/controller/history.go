package controller

import (
	"cmp"
	"context"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// historyInterval is how often the leader prunes ended incidents; it also prunes when it
// takes over.
const historyInterval = 10 * time.Minute

// pruneHistory deletes the ended incidents that the history retention no longer keeps
// (config History): older than MaxAge, or beyond the newest KeepPerNode of their node.
// The newest ended incident of a node always stays, open ones are never touched, and
// only incidents the controller opened are deleted (invariant 6).
func (c *Controller) pruneHistory(ctx context.Context) {
	for _, nf := range c.expiredIncidents(c.now()) {
		if err := c.checkLease(ctx); err != nil {
			return // not confirmed as leader: nothing is deleted; the next round tries again
		}
		uid, rv := nf.UID, nf.ResourceVersion
		err := c.store.client.Delete(ctx, nf.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			klog.FromContext(ctx).Error(err, "Pruning incident history", "incident", nf.Name)
			continue
		}
		klog.FromContext(ctx).V(2).Info("Pruned an ended incident", "incident", nf.Name, "node", nf.Spec.NodeName, "phase", nf.Status.Phase)
	}
}

// expiredIncidents lists the cached incidents that retention deletes at now.
func (c *Controller) expiredIncidents(now time.Time) []*v1alpha1.NodeFence {
	byNode := map[string][]*v1alpha1.NodeFence{}
	for _, obj := range c.store.indexer.List() {
		nf, err := cached(obj)
		if err != nil || nf.Status.Phase.Open() || nf.Spec.RequestedBy != v1alpha1.RequestedByController {
			continue // one that cannot be read is kept: retention never deletes on a guess
		}
		byNode[nf.Spec.NodeName] = append(byNode[nf.Spec.NodeName], nf)
	}
	h := c.cfg.History
	var out []*v1alpha1.NodeFence
	for _, ended := range byNode {
		slices.SortFunc(ended, func(a, b *v1alpha1.NodeFence) int {
			return cmp.Or(openedAt(b).Compare(openedAt(a)), cmp.Compare(b.Name, a.Name))
		})
		for i, nf := range ended {
			if i == 0 {
				continue
			}
			if i >= int(h.KeepPerNode) || now.Sub(openedAt(nf)) > h.MaxAge.Duration {
				out = append(out, nf)
			}
		}
	}
	return out
}

// openedAt is when an incident opened: its first step, to the microsecond, or its
// creation, to the second.
func openedAt(nf *v1alpha1.NodeFence) time.Time {
	if len(nf.Status.Timeline) > 0 {
		return nf.Status.Timeline[0].Time.Time
	}
	return nf.CreationTimestamp.Time
}
