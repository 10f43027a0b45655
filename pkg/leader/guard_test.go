package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestGuardCheck: the shared guard checks at the epoch it leads at, on its clock; a newer
// leader stops the replica (OnDeposed) and a failed read marks the API server unreachable,
// never both.
func TestGuardCheck(t *testing.T) {
	now := time.Now()
	tests := map[string]struct {
		lease       *coordinationv1.Lease
		epoch       int64
		wantErr     bool
		deposed     bool
		unreachable bool
	}{
		"held at this epoch":   {lease: leaderLease("me", 2, now), epoch: 3},
		"another holder":       {lease: leaderLease("other", 2, now), epoch: 3, wantErr: true, deposed: true},
		"not led yet":          {lease: leaderLease("me", 2, now), epoch: 0, wantErr: true, deposed: true},
		"no Lease to read":     {epoch: 3, wantErr: true, unreachable: true},
		"expired on the clock": {lease: leaderLease("me", 2, now.Add(-time.Minute)), epoch: 3, wantErr: true, deposed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientset()
			if tc.lease != nil {
				c = fake.NewClientset(tc.lease)
			}
			var deposed error
			g := NewGuard(guardFor(c), func() time.Time { return now }, func(err error) { deposed = err })
			g.Lead(tc.epoch)
			err := g.Check(context.Background())
			if (err != nil) != tc.wantErr {
				t.Fatalf("Check = %v, want an error %v", err, tc.wantErr)
			}
			if (deposed != nil) != tc.deposed || (deposed != nil && !errors.Is(deposed, ErrStaleEpoch)) {
				t.Errorf("OnDeposed told %v, want deposed %v", deposed, tc.deposed)
			}
			if got := g.TakeUnreachable(); got != tc.unreachable {
				t.Errorf("TakeUnreachable = %v, want %v", got, tc.unreachable)
			}
			if g.TakeUnreachable() {
				t.Error("TakeUnreachable did not clear the mark")
			}
		})
	}
}

// TestGuardConfirmed: after a passed check, Confirmed reads no Lease within the renew
// deadline; without leader election every check passes and reads nothing.
func TestGuardConfirmed(t *testing.T) {
	now := time.Now()
	c := fake.NewClientset(leaderLease("me", 0, now))
	lease := guardFor(c)
	lease.Config.RenewDeadline.Duration = time.Minute
	g := NewGuard(lease, func() time.Time { return now }, nil)
	g.Lead(1)
	if err := g.Confirmed(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.ClearActions()
	if err := g.Confirmed(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := reads(c.Actions()); got != 1 {
		t.Errorf("Confirmed then Check read the Lease %d times, want once (by Check)", got)
	}

	deposed := 0
	off := NewGuard(nil, time.Now, func(error) { deposed++ })
	if err := errors.Join(off.Check(context.Background()), off.Confirmed(context.Background())); err != nil || deposed != 0 {
		t.Errorf("without leader election: %v, deposed %d times", err, deposed)
	}
	// A write refused for its epoch stops the replica, with or without leader election.
	off.Deposed(errors.New("other"))
	off.Deposed(ErrStaleEpoch)
	if deposed != 1 {
		t.Errorf("deposed %d times, want once (by ErrStaleEpoch)", deposed)
	}
}

func reads(actions []k8stesting.Action) int {
	n := 0
	for _, a := range actions {
		if a.GetVerb() == "get" && a.GetResource().Resource == "leases" {
			n++
		}
	}
	return n
}
