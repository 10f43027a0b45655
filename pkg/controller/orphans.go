package controller

import (
	"context"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/remediate"
)

// reconcileOrphans compares what kubefence changed on nodes with its incidents, as the
// kuryr HA design asks of a leader that took over from one that died mid-step. A taint
// recorded by a closed incident, in its record or in the node's owner mark naming it, is
// removed; kubefence's own taint with neither behind it is reported and left for a
// person: it is never guessed at.
func (c *Controller) reconcileOrphans(ctx context.Context) {
	nodes, err := c.nodes.List(everything())
	if err != nil {
		return // a cache read; the next round (a minute on) tries again
	}
	for _, n := range nodes {
		if !hasTaintKey(n, remediate.FencedTaint.Key) && !hasTaintKey(n, remediate.OutOfServiceTaint.Key) {
			continue
		}
		incs, err := c.store.ForNode(n.Name)
		if err != nil {
			continue // an incident the cache cannot decode: a person looks, not a guess
		}
		if slices.ContainsFunc(incs, func(nf *v1alpha1.NodeFence) bool { return nf.Status.Phase.Open() }) {
			continue // the open incident owns its changes and will undo them
		}
		c.repairOrphan(ctx, n, incs)
	}
}

func (c *Controller) repairOrphan(ctx context.Context, n *corev1.Node, incs []*v1alpha1.NodeFence) {
	sort.Slice(incs, func(i, j int) bool { return incs[j].CreationTimestamp.Before(&incs[i].CreationTimestamp) })
	for _, nf := range incs {
		if len(nf.Status.Remediation.TaintsAdded) == 0 && len(remediate.Owned(n, nf.Name)) == 0 {
			continue
		}
		nf = nf.DeepCopy()
		ctx := withLogValues(ctx, "node", n.Name, "incident", nf.Name)
		if err := c.checkLease(ctx); err != nil {
			return // not confirmed as leader: nothing is touched; checkLease acted on a deposition
		}
		r := *c.remedy
		r.OnStep = func(step, msg string) { c.step(ctx, nf, c.now(), v1alpha1.StepOrphanPrefix+step, msg) }
		removed, err := r.RemoveTaints(ctx, nf.Name, n.Name, &nf.Status.Remediation)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Repairing orphaned taints")
			return
		}
		if len(removed) > 0 {
			c.metrics.orphans.WithLabelValues(orphanRepaired).Inc()
			c.event(n, nf, corev1.EventTypeWarning, v1alpha1.ReasonOrphanRepaired,
				"Removed taints %v of node %s that closed incident %s recorded but had not removed", removed, n.Name, nf.Name)
		}
		// A record whose taints were gone already is cleared, and the next record (or
		// an unrecorded fenced taint) is looked at in the next round.
		if err := c.save(ctx, nf); err != nil {
			klog.FromContext(ctx).Error(err, "Recording orphan repair")
		}
		return
	}
	if hasTaintKey(n, remediate.FencedTaint.Key) {
		// An Event is a mutation too: it follows a Lease check (invariant 2).
		if err := c.leaseConfirmed(ctx); err != nil {
			return // not confirmed as leader: no Event
		}
		c.metrics.orphans.WithLabelValues(orphanReported).Inc()
		c.event(n, nil, corev1.EventTypeWarning, v1alpha1.ReasonOrphanTaint,
			"Node %s carries %s but no incident records adding it; left in place for a person to check",
			n.Name, remediate.FencedTaint.Key)
	}
}

func hasTaintKey(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}
