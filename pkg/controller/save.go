package controller

import (
	"context"
	"errors"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/leader"
)

// leaseConfirmed passes when a Lease check passed within the renew deadline, and checks
// the Lease again otherwise: each pod and VolumeAttachment deletion of a release follows
// a check that recent, without a read of the Lease for every one of them.
func (c *Controller) leaseConfirmed(ctx context.Context) error {
	if c.guard == nil || c.guard.Confirmed() {
		return nil
	}
	return c.checkLease(ctx)
}

// checkLease confirms, before an irreversible action, that this replica still leads at
// its epoch; a deposed replica stops at once.
func (c *Controller) checkLease(ctx context.Context) error {
	if c.guard == nil {
		return nil
	}
	err := c.guard.Check(ctx, c.currentEpoch(), c.now())
	switch {
	case errors.Is(err, leader.ErrStaleEpoch) && c.opts.OnDeposed != nil:
		c.opts.OnDeposed(err)
	case err != nil && !errors.Is(err, leader.ErrStaleEpoch):
		c.apiUnreachable.Store(true)
	}
	return err
}

// save persists the incident's status at this replica's epoch and keeps the fresh copy.
// The Lease is checked first: the resourceVersion only catches a newer leader that has
// already written this incident, not one that has not touched it yet.
func (c *Controller) save(ctx context.Context, nf *v1alpha1.NodeFence) error {
	if err := c.checkLease(ctx); err != nil {
		return err
	}
	saved, err := c.store.writeStatus(ctx, nf, c.currentEpoch(), c.opts.Identity)
	if err != nil {
		if errors.Is(err, leader.ErrStaleEpoch) && c.opts.OnDeposed != nil {
			c.opts.OnDeposed(err)
		}
		return err
	}
	*nf = *saved
	c.flushEvents(nf.Name)
	return nil
}
