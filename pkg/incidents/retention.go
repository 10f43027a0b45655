package incidents

import (
	"cmp"
	"context"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// HistoryInterval is how often the leader prunes ended incidents; it also prunes when it
// takes over.
const HistoryInterval = 10 * time.Minute

// Retention deletes the ended incidents the history configuration no longer keeps
// (config History): older than MaxAge, or beyond the newest KeepPerNode of their node.
// The newest ended incident of a node always stays, open ones are never touched, and
// only incidents the controller opened are deleted (invariant 6). Only the leader runs
// it.
type Retention struct {
	Store   *Store
	History v1alpha1.History
	// Confirm passes while this replica leads (a Lease check); nothing is deleted while it
	// fails.
	Confirm func(ctx context.Context) error
	Now     func() time.Time
}

// Run prunes now and every HistoryInterval until ctx ends.
func (r *Retention) Run(ctx context.Context) {
	wait.UntilWithContext(ctx, r.Prune, HistoryInterval)
}

// Prune deletes what retention no longer keeps, once.
func (r *Retention) Prune(ctx context.Context) {
	for _, nf := range r.expired(r.Now()) {
		if err := r.Confirm(ctx); err != nil {
			return // not confirmed as leader: nothing is deleted; the next round tries again
		}
		uid, rv := nf.UID, nf.ResourceVersion
		err := r.Store.client.Delete(ctx, nf.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			klog.FromContext(ctx).Error(err, "Pruning incident history", "incident", nf.Name)
			continue
		}
		klog.FromContext(ctx).V(2).Info("Pruned an ended incident", "incident", nf.Name, "node", nf.Spec.NodeName, "phase", nf.Status.Phase)
	}
}

// expired lists the cached incidents that retention deletes at now.
func (r *Retention) expired(now time.Time) []*v1alpha1.NodeFence {
	byNode := map[string][]*v1alpha1.NodeFence{}
	for _, obj := range r.Store.indexer.List() {
		nf, err := cached(obj)
		if err != nil || nf.Status.Phase.Open() || nf.Spec.RequestedBy != v1alpha1.RequestedByController {
			continue // one that cannot be read is kept: retention never deletes on a guess
		}
		byNode[nf.Spec.NodeName] = append(byNode[nf.Spec.NodeName], nf)
	}
	h := r.History
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
