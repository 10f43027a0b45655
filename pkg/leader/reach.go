package leader

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// Reach is this replica's own record of reaching the API server: since when every read
// and write of the leader Lease it made (a standby tries to acquire it every retry
// period, a leader renews it as often) was answered, with no gap between two answers
// longer than MaxGap. A standby that kept the API server in reach kept watching the
// node Leases too, and its evidence of a node's silence is as good as a leader's: on
// takeover the Lease clocks restart from Since, not from the takeover (see
// Detector.RestartClocks). A failed call, or a gap, starts the record again: the API
// server may have been out of reach for the kubelets as well, and staleness measured
// across that blackout is the control plane's, not the nodes'.
//
// Only this process's own calls and clock count: nothing the old leader wrote or saw
// is trusted.
type Reach struct {
	// MaxGap is the longest time between two answers that still counts as unbroken.
	MaxGap time.Duration

	mu    sync.Mutex
	since time.Time
	last  time.Time
}

// ReachGap is the MaxGap of a replica's Reach under cfg: a standby tries to acquire the
// leader Lease every retry period, jittered up to 2.2 of them after its last try ended,
// and a leader renews it every retry period; three retry periods without an answer is a
// break.
func ReachGap(cfg v1alpha1.LeaderElection) time.Duration { return 3 * cfg.RetryPeriod.Duration }

// Seen records a call to the API server that ended at at; ok means it was answered.
func (r *Reach) Seen(ok bool, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !ok:
		r.since, r.last = time.Time{}, time.Time{}
		return
	case r.last.IsZero() || at.Sub(r.last) > r.MaxGap:
		r.since = at
	}
	if at.After(r.last) {
		r.last = at
	}
}

// Since is when the API server came in reach and stayed so until now; zero when it is
// not in reach now (no answer yet, the last call failed, or the last answer is older
// than MaxGap).
func (r *Reach) Since(now time.Time) time.Time {
	if r == nil {
		return time.Time{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last.IsZero() || now.Sub(r.last) > r.MaxGap {
		return time.Time{}
	}
	return r.since
}

// answered reports whether err is an answer of the API server that needed its storage:
// none, or a NotFound, Conflict or AlreadyExists. A timeout, a refused connection or a
// server error (etcd out of reach) is not: kubelets could not renew then either.
func answered(err error) bool {
	return err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
}

// reachLock is a leader-election lock that records in a Reach how each of its calls to
// the API server ended.
type reachLock struct {
	resourcelock.Interface
	reach *Reach
	now   func() time.Time
}

func (l reachLock) seen(err error) error {
	l.reach.Seen(answered(err), l.now())
	return err
}

func (l reachLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	return rec, raw, l.seen(err)
}

func (l reachLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.seen(l.Interface.Create(ctx, ler))
}

func (l reachLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.seen(l.Interface.Update(ctx, ler))
}
