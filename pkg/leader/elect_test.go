package leader

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

func leaderLease(holder string, transitions int32, renew time.Time) *coordinationv1.Lease {
	d := int32(15)
	r := metav1.NewMicroTime(renew)
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kubefence", Name: "kubefence"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseTransitions: &transitions,
			LeaseDurationSeconds: &d, RenewTime: &r}}
}

func guardFor(c *fake.Clientset) *LeaseGuard {
	return &LeaseGuard{Client: c, Identity: "me",
		Config: v1alpha1.LeaderElection{Namespace: "kubefence", Name: "kubefence"}}
}

func TestLeaseGuardCheck(t *testing.T) {
	now := time.Date(2026, 11, 22, 6, 0, 30, 500_000_000, time.UTC)
	tests := map[string]struct {
		lease *coordinationv1.Lease
		epoch int64
		stale bool
	}{
		// Renewed at :15.9, so renewTime+15s is :30.9, still ahead; but a standby that
		// missed that renewal (same second as the one before) may take over at :30.0.
		"expiry counted from the renewal's second": {leaderLease("me", 2, now.Add(-14600*time.Millisecond)), 3, true},
		"renewed within its duration":              {leaderLease("me", 2, now.Add(-14*time.Second)), 3, false},
		"held at this epoch":                       {leaderLease("me", 2, now), 3, false},
		"another holder":                           {leaderLease("other", 2, now), 3, true},
		"re-acquired since":                        {leaderLease("me", 4, now), 3, true},
		"expired while paused":                     {leaderLease("me", 2, now.Add(-time.Minute)), 3, true},
		"first holder, epoch one":                  {leaderLease("me", 0, now), 1, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := guardFor(fake.NewClientset(tc.lease))
			err := g.Check(context.Background(), tc.epoch, now)
			if got := errors.Is(err, ErrStaleEpoch); got != tc.stale {
				t.Fatalf("Check = %v, want stale %v", err, tc.stale)
			}
		})
	}
	g := guardFor(fake.NewClientset())
	if err := g.Check(context.Background(), 1, now); err == nil || errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("Check without a Lease = %v, want a read error", err)
	}
}

// TestLeaseGuardConfirmed: a passed check confirms the Lease for a renew deadline past
// its read, and never past the Lease's expiry; a failed one confirms nothing.
func TestLeaseGuardConfirmed(t *testing.T) {
	now := time.Now()
	for name, tc := range map[string]struct {
		lease     *coordinationv1.Lease
		deadline  time.Duration
		confirmed bool
	}{
		"renewed now, within the renew deadline": {leaderLease("me", 0, now), time.Hour, true},
		"past the renew deadline":                {leaderLease("me", 0, now), time.Nanosecond, false},
		"renew deadline longer than the Lease":   {leaderLease("me", 0, now.Add(-16*time.Second)), time.Hour, false},
		"held by another: nothing is confirmed":  {leaderLease("other", 0, now), time.Hour, false},
	} {
		t.Run(name, func(t *testing.T) {
			g := guardFor(fake.NewClientset(tc.lease))
			g.Config.RenewDeadline = metav1.Duration{Duration: tc.deadline}
			_ = g.Check(context.Background(), 1, now.Add(-20*time.Second))
			if got := g.Confirmed(); got != tc.confirmed {
				t.Errorf("Confirmed() = %v, want %v", got, tc.confirmed)
			}
		})
	}
}

// TestLeaseGuardConfirmedOnTheMonotonicClock: however a confirmation is bounded (the
// renew deadline, or the Lease's expiry, a wall-clock time), it is a time on the
// monotonic clock: Confirmed compares monotonic readings, and the wall clock stepping
// backwards (NTP, a VM restored) cannot stretch it.
func TestLeaseGuardConfirmedOnTheMonotonicClock(t *testing.T) {
	now := time.Now()
	for name, deadline := range map[string]time.Duration{"bound by the expiry": time.Hour, "bound by the renew deadline": time.Second} {
		t.Run(name, func(t *testing.T) {
			g := guardFor(fake.NewClientset(leaderLease("me", 0, now)))
			g.Config.RenewDeadline = metav1.Duration{Duration: deadline}
			if err := g.Check(context.Background(), 1, now); err != nil {
				t.Fatal(err)
			}
			until := g.ConfirmedUntil()
			if !strings.Contains(until.String(), "m=") {
				t.Errorf("confirmed until %s: no monotonic reading", until)
			}
			if !g.Confirmed() {
				t.Error("not confirmed right after a check that passed")
			}
		})
	}
}

// Checks that arrive while a read is under way share the next read, never the one under
// way: a Lease taken over meanwhile is seen by every one of them.
func TestLeaseGuardSharesOnlyLaterReads(t *testing.T) {
	now := time.Now()
	ours := leaderLease("me", 0, now)
	c := fake.NewClientset(ours)
	var gets atomic.Int32
	first, release := make(chan struct{}), make(chan struct{})
	c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if gets.Add(1) == 1 {
			// The first read saw the Lease still ours; its answer is slow to come back.
			close(first)
			<-release
			return true, ours, nil
		}
		return false, nil, nil
	})
	g := guardFor(c)
	early := make(chan error, 1)
	go func() { early <- g.Check(context.Background(), 1, now) }()
	<-first
	// The first read is now under way, with the Lease still ours. Another replica takes
	// over before the next checks arrive.
	// (Through the tracker: the fake client is locked while its reactor blocks.)
	if err := c.Tracker().Update(coordinationv1.SchemeGroupVersion.WithResource("leases"),
		leaderLease("other", 1, now), "kubefence"); err != nil {
		t.Fatal(err)
	}
	const late = 50
	var wg sync.WaitGroup
	errs := make(chan error, late)
	started := make(chan struct{}, late)
	for range late {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			errs <- g.Check(context.Background(), 1, now)
		}()
	}
	for range late {
		<-started
	}
	// Let every late check queue up behind the read under way before it returns.
	deadline := time.Now().Add(time.Minute)
	for waiting(g) < late {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d checks queued for the next read", waiting(g), late)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-early; err != nil {
		t.Fatalf("the check whose read began before the take-over: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrStaleEpoch) {
			t.Fatalf("a check that arrived after the take-over passed or failed otherwise: %v", err)
		}
	}
	if n := gets.Load(); n != 2 {
		t.Errorf("%d reads for %d checks, want 2: the one under way and one shared by the rest", n, 1+late)
	}
}

// waiting returns how many checks are queued for the next read.
func waiting(g *LeaseGuard) int {
	if g.reads == nil {
		return 0
	}
	return g.reads.Waiting()
}
