package leader

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Guard is this replica's standing as leader, one per process, shared by every controller
// that writes or acts: the epoch it leads at, the Lease check before an irreversible
// action (Check), the check that passed within the renew deadline before any other write
// (Confirmed), and the stop of a deposed replica. pkg/app makes it and hands it to the
// incident loop and to each of its peers, so that none of them asks another for it.
type Guard struct {
	// lease reads the leader Lease; nil without leader election, when every check passes.
	lease *LeaseGuard
	now   func() time.Time
	// onDeposed is told when a newer leader is found: the replica must stop at once.
	onDeposed func(error)

	mu    sync.Mutex
	epoch int64
	// unreachable is set when a check failed on something else than a newer leader: the
	// API server may be down, and with it every kubelet's renewals (TakeUnreachable).
	unreachable atomic.Bool
}

// NewGuard is the guard of a replica that checks lease (nil: no leader election) on the
// clock now, and calls onDeposed (may be nil) when a newer leader is found.
func NewGuard(lease *LeaseGuard, now func() time.Time, onDeposed func(error)) *Guard {
	return &Guard{lease: lease, now: now, onDeposed: onDeposed}
}

// Lead sets the fencing epoch this replica acts at from now on.
func (g *Guard) Lead(epoch int64) {
	g.mu.Lock()
	g.epoch = epoch
	g.mu.Unlock()
}

// Epoch is the fencing epoch this replica acts at (0: it has not led yet).
func (g *Guard) Epoch() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.epoch
}

// Check confirms, before an irreversible action, that this replica still leads at its
// epoch, with a read of the Lease sent after the call; a deposed replica stops at once.
func (g *Guard) Check(ctx context.Context) error {
	if g.lease == nil {
		return nil
	}
	err := g.lease.Check(ctx, g.Epoch(), g.now())
	switch {
	case errors.Is(err, ErrStaleEpoch):
		g.Deposed(err)
	case err != nil:
		g.unreachable.Store(true)
	}
	return err
}

// Confirmed passes when a Lease check passed within the renew deadline, and checks the
// Lease again otherwise: each pod and VolumeAttachment deletion of a release, and each
// save of an incident, follows a check that recent, without a read of the Lease for every
// one of them.
func (g *Guard) Confirmed(ctx context.Context) error {
	if g.lease == nil || g.lease.Confirmed() {
		return nil
	}
	return g.Check(ctx)
}

// Deposed stops the replica when err says a newer leader holds the Lease or wrote what
// this replica meant to write (ErrStaleEpoch); any other error is left to the caller.
func (g *Guard) Deposed(err error) {
	if errors.Is(err, ErrStaleEpoch) && g.onDeposed != nil {
		g.onDeposed(err)
	}
}

// NoteUnreachable records that a read of the API server failed.
func (g *Guard) NoteUnreachable() { g.unreachable.Store(true) }

// TakeUnreachable reports whether a read of the API server failed since the last call,
// and clears it.
func (g *Guard) TakeUnreachable() bool { return g.unreachable.CompareAndSwap(true, false) }
