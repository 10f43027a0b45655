package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/coalesce"
)

// ErrStaleEpoch means a leader with a newer fencing epoch holds the Lease, or has written
// what this replica meant to write: this replica has been deposed and must stop at once.
var ErrStaleEpoch = errors.New("incident written by a newer leader epoch")

// NewIdentity returns hostname_PID_suffix, unique per process even across restarts
// with a recycled PID, as the apiserver-identity proposal does for kube-apiservers.
func NewIdentity() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	b := make([]byte, 4)
	// crypto/rand.Read never returns an error (Go 1.24: it crashes the program instead).
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s_%d_%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Elect runs leader election on the configured Lease. lead runs while this replica
// leads, with the fencing epoch (the Lease's transition count when it was acquired).
// onLost is called the moment leadership is lost; it must not return (main exits 2).
// reach, when not nil, records how every call to the leader Lease ended.
func Elect(ctx context.Context, client kubernetes.Interface, cfg v1alpha1.LeaderElection, identity string, reach *Reach,
	lead func(ctx context.Context, epoch int64), onLost func()) error {
	var lock resourcelock.Interface = &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	if reach != nil {
		lock = reachLock{Interface: lock, reach: reach, now: time.Now}
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.LeaseDuration.Duration,
		RenewDeadline:   cfg.RenewDeadline.Duration,
		RetryPeriod:     cfg.RetryPeriod.Duration,
		ReleaseOnCancel: true,
		Name:            cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				epoch, err := currentEpoch(ctx, client, cfg, identity)
				if err != nil {
					klog.FromContext(ctx).Error(err, "Reading fencing epoch")
					onLost()
					return
				}
				lead(ctx, epoch)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					onLost()
				}
			},
			OnNewLeader: func(id string) { klog.FromContext(ctx).Info("Leader observed", "leader", id) },
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx)
	return nil
}

// currentEpoch reads the Lease this replica just acquired.
func currentEpoch(ctx context.Context, client kubernetes.Interface, cfg v1alpha1.LeaderElection, identity string) (int64, error) {
	lease, err := client.CoordinationV1().Leases(cfg.Namespace).Get(ctx, cfg.Name, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("read lease %s/%s: %w", cfg.Namespace, cfg.Name, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != identity {
		return 0, fmt.Errorf("lease %s/%s is not held by %s", cfg.Namespace, cfg.Name, identity)
	}
	var t int32
	if lease.Spec.LeaseTransitions != nil {
		t = *lease.Spec.LeaseTransitions
	}
	// Transitions start at 0 for the first holder; epoch 0 means "no election".
	return int64(t) + 1, nil
}

// LeaseGuard checks, right before an irreversible action, that this replica still holds
// the Lease with the epoch it acts under: a replica paused past its lease (GC, SIGSTOP,
// a partition) finds out here instead of fencing or releasing on stale authority.
//
// Checks that arrive together share one read: a check waits for a read sent after it
// arrived, never one already under way, so each still sees the Lease as it is now.
// A hundred incidents at once then cost a few reads of the Lease, not a hundred.
type LeaseGuard struct {
	Client   kubernetes.Interface
	Config   v1alpha1.LeaderElection
	Identity string

	once  sync.Once
	reads *coalesce.Read[*coordinationv1.Lease]

	mu sync.Mutex
	// confirmedUntil is a renew deadline past the sending of the last read that
	// confirmed this replica's Lease, on this process's monotonic clock: until then, a
	// side effect that follows a passed check (an Event sent by the broadcaster) may
	// still go out.
	confirmedUntil time.Time
	// epoch is the epoch of the last check that passed (0: none yet).
	epoch int64
}

// read returns a GET of the Lease sent after the call, shared with the checks that
// arrived with this one.
func (g *LeaseGuard) read(ctx context.Context) (coalesce.Result[*coordinationv1.Lease], error) {
	g.once.Do(func() {
		g.reads = &coalesce.Read[*coordinationv1.Lease]{Timeout: leaseReadTimeout,
			Do: func(ctx context.Context) (*coordinationv1.Lease, error) {
				return g.Client.CoordinationV1().Leases(g.Config.Namespace).Get(ctx, g.Config.Name, metav1.GetOptions{})
			}}
	})
	return g.reads.Get(ctx)
}

// leaseReadTimeout bounds one read of the leader Lease.
const leaseReadTimeout = 10 * time.Second

// Check returns ErrStaleEpoch when the Lease moved on.
func (g *LeaseGuard) Check(ctx context.Context, epoch int64, now time.Time) error {
	r, err := g.read(ctx)
	if err != nil {
		return fmt.Errorf("check lease %s/%s: %w", g.Config.Namespace, g.Config.Name, err)
	}
	expiry, err := g.judge(r.Value, epoch, now)
	if err != nil {
		return err
	}
	// Confirmed for a renew deadline past the read, and never past the Lease's expiry as
	// a standby counts it (renewTime was written by this process's own clock). The
	// expiry is a wall-clock time: it is turned into a time on the monotonic clock, as
	// the read's is, so that Confirmed compares monotonic readings and a step of the wall
	// clock backwards cannot stretch a confirmation.
	until := r.Sent.Add(g.Config.RenewDeadline.Duration)
	if !expiry.IsZero() {
		read := time.Now()
		if bound := read.Add(expiry.Sub(read)); bound.Before(until) {
			until = bound
		}
	}
	g.mu.Lock()
	if until.After(g.confirmedUntil) {
		g.confirmedUntil = until
	}
	g.epoch = epoch
	g.mu.Unlock()
	return nil
}

// Confirmed reports whether a check passed within the renew deadline: a replica paused
// longer than that (SIGSTOP, a frozen VM) may have been replaced while it slept.
func (g *LeaseGuard) Confirmed() bool { return time.Now().Before(g.ConfirmedUntil()) }

// Reconfirm checks the Lease again at the epoch of the last check that passed, for a
// side effect that outlived its confirmation (an Event still queued behind a thousand
// others); it fails when no check passed yet, and with ErrStaleEpoch when the Lease moved
// on since.
func (g *LeaseGuard) Reconfirm(ctx context.Context) error {
	g.mu.Lock()
	epoch := g.epoch
	g.mu.Unlock()
	if epoch == 0 {
		return fmt.Errorf("lease %s/%s: no check has passed yet: %w", g.Config.Namespace, g.Config.Name, ErrStaleEpoch)
	}
	return g.Check(ctx, epoch, time.Now())
}

// ConfirmedUntil is when the last passed check stops vouching for this replica: the
// deadline of any request that relies on it.
func (g *LeaseGuard) ConfirmedUntil() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.confirmedUntil
}

// judge returns ErrStaleEpoch when lease is no longer this replica's at epoch, and
// otherwise when it expires (zero when the Lease does not say).
func (g *LeaseGuard) judge(lease *coordinationv1.Lease, epoch int64, now time.Time) (time.Time, error) {
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	var t int32
	if lease.Spec.LeaseTransitions != nil {
		t = *lease.Spec.LeaseTransitions
	}
	if holder != g.Identity || int64(t)+1 != epoch {
		return time.Time{}, fmt.Errorf("lease %s/%s held by %q at epoch %d, this replica acts at epoch %d: %w",
			g.Config.Namespace, g.Config.Name, holder, int64(t)+1, epoch, ErrStaleEpoch)
	}
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return time.Time{}, nil
	}
	// A standby counts the Lease's duration from when it saw the leader's record
	// change, and client-go compares records with renewTime cut to the second: a
	// renewal in the same second as the one before goes unseen. So a standby may take
	// over one duration after the first renewal of renewTime's second, not of
	// renewTime itself.
	expiry := lease.Spec.RenewTime.Truncate(time.Second).Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	if now.After(expiry) {
		return time.Time{}, fmt.Errorf("lease %s/%s expired at %s: %w", g.Config.Namespace, g.Config.Name, expiry.UTC().Format(time.RFC3339), ErrStaleEpoch)
	}
	return expiry, nil
}
