package controller

import (
	"context"
	"fmt"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/buildinfo"
)

// save persists the incident's status at this replica's epoch and keeps the fresh copy.
// It follows a Lease check that passed within the renew deadline (leader.Guard.Confirmed): the
// resourceVersion only catches a newer leader that has already written this incident,
// not one that has not touched it yet, and no standby can take over within the renew
// deadline of a check that found this replica leading. A check of its own per save cost
// a read of the leader Lease on the critical path of every incident; the one read that
// must be fresh is the one before an agent's Fence call (fence.go).
func (c *Controller) save(ctx context.Context, nf *v1alpha1.NodeFence) error {
	if err := c.lead.guard.Confirmed(ctx); err != nil {
		return err
	}
	if prev := nf.Status.Leader; prev != "" && prev != c.opts.Identity && nf.Status.Phase.Open() {
		// Across a handover, an upgrade or a rollback the timeline says which replica,
		// of which release, went on with the incident.
		c.step(ctx, nf, c.now(), v1alpha1.StepTakenUp, fmt.Sprintf("taken up by %s (fence-controller %s) from %s",
			c.opts.Identity, buildinfo.Version(), prev))
	}
	saved, err := c.store.WriteStatus(ctx, nf, c.lead.guard.Epoch(), c.opts.Identity)
	if err != nil {
		c.lead.guard.Deposed(err)
		return err
	}
	*nf = *saved
	c.flushEvents(nf)
	return nil
}
