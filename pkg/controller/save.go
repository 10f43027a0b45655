package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/buildinfo"
	"github.com/kubefence/kubefence/pkg/leader"
)

// leaseConfirmed passes when a Lease check passed within the renew deadline, and checks
// the Lease again otherwise: each pod and VolumeAttachment deletion of a release follows
// a check that recent, without a read of the Lease for every one of them.
func (c *Controller) leaseConfirmed(ctx context.Context) error {
	if c.lead.guard == nil || c.lead.guard.Confirmed() {
		return nil
	}
	return c.checkLease(ctx)
}

// checkLease confirms, before an irreversible action, that this replica still leads at
// its epoch; a deposed replica stops at once.
func (c *Controller) checkLease(ctx context.Context) error {
	if c.lead.guard == nil {
		return nil
	}
	err := c.lead.guard.Check(ctx, c.currentEpoch(), c.now())
	switch {
	case errors.Is(err, leader.ErrStaleEpoch) && c.opts.Leader.OnDeposed != nil:
		c.opts.Leader.OnDeposed(err)
	case err != nil && !errors.Is(err, leader.ErrStaleEpoch):
		c.lead.apiUnreachable.Store(true)
	}
	return err
}

// save persists the incident's status at this replica's epoch and keeps the fresh copy.
// It follows a Lease check that passed within the renew deadline (leaseConfirmed): the
// resourceVersion only catches a newer leader that has already written this incident,
// not one that has not touched it yet, and no standby can take over within the renew
// deadline of a check that found this replica leading. A check of its own per save cost
// a read of the leader Lease on the critical path of every incident; the one read that
// must be fresh is the one before an agent's Fence call (fence.go).
func (c *Controller) save(ctx context.Context, nf *v1alpha1.NodeFence) error {
	if err := c.leaseConfirmed(ctx); err != nil {
		return err
	}
	if prev := nf.Status.Leader; prev != "" && prev != c.opts.Identity && nf.Status.Phase.Open() {
		// Across a handover, an upgrade or a rollback the timeline says which replica,
		// of which release, went on with the incident.
		c.step(ctx, nf, c.now(), v1alpha1.StepTakenUp, fmt.Sprintf("taken up by %s (fence-controller %s) from %s",
			c.opts.Identity, buildinfo.Version(), prev))
	}
	saved, err := c.store.WriteStatus(ctx, nf, c.currentEpoch(), c.opts.Identity)
	if err != nil {
		if errors.Is(err, leader.ErrStaleEpoch) && c.opts.Leader.OnDeposed != nil {
			c.opts.Leader.OnDeposed(err)
		}
		return err
	}
	*nf = *saved
	c.flushEvents(nf)
	return nil
}
