package controller

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/leader"
)

// TestTakeoverKeepsStandbyEvidence: a standby that kept the API server in reach judges a
// node on the Lease silence it watched while standing by (the leader's own node is not
// judged a whole threshold after the takeover), and never counts silence across a break
// in its own reach: from there the silence counts again, as after an API outage.
func TestTakeoverKeepsStandbyEvidence(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	takeover := t0.Add(20 * time.Second)
	gap := 6 * time.Second
	// answers lists the ends of this replica's calls to the leader Lease, every 2 s from
	// a minute before the node's last renewal, but for the ones failed or missing.
	answers := func(skip func(at time.Time) (failed, missing bool)) *leader.Reach {
		r := &leader.Reach{MaxGap: gap}
		for at := t0.Add(-time.Minute); !at.After(takeover); at = at.Add(2 * time.Second) {
			if failed, missing := skip(at); !missing {
				r.Seen(!failed, at)
			}
		}
		return r
	}
	between := func(from, to time.Duration) func(time.Time) bool {
		return func(at time.Time) bool { return !at.Before(t0.Add(from)) && at.Before(t0.Add(to)) }
	}
	for name, tc := range map[string]struct {
		reach *leader.Reach
		// later is how much later than the standby's own evidence the node turns unhealthy.
		later time.Duration
	}{
		"in reach all along: the silence watched as a standby counts": {
			answers(func(time.Time) (bool, bool) { return false, false }), 0},
		"no reach recorded (no leader election): counted from the takeover": {nil, 20 * time.Second},
		"a call failed at +10s: counted from the first answer after it": {
			answers(func(at time.Time) (bool, bool) { return between(10*time.Second, 12*time.Second)(at), false }), 12 * time.Second},
		"no answer from +8s to +16s (longer than MaxGap): counted from +16s": {
			answers(func(at time.Time) (bool, bool) { return false, between(8*time.Second, 16*time.Second)(at) }), 16 * time.Second},
		"no answer since +12s: out of reach at the takeover, counted from it": {
			answers(func(at time.Time) (bool, bool) { return false, !at.Before(t0.Add(12 * time.Second)) }), 20 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			c := testController(t, pendingIncident(t0, nil))
			c.opts.Leader.Reach = tc.reach
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
			for _, at := range []time.Time{t0.Add(-20 * time.Second), t0.Add(-10 * time.Second), t0} {
				rt := metav1.NewMicroTime(at)
				c.detector.ObserveLease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Namespace: NodeLeaseNamespace},
					Spec: coordinationv1.LeaseSpec{RenewTime: &rt}}, at)
			}
			watched := c.detector.Assess(node, takeover).UnhealthyAt
			if watched.IsZero() || !watched.After(takeover) {
				t.Fatalf("setup: the standby's evidence makes node-1 unhealthy at %s, want after the takeover at %s", watched, takeover)
			}
			from := c.takeOver(takeover)
			got := c.detector.Assess(node, takeover).UnhealthyAt
			if want := watched.Add(tc.later); !got.Equal(want) {
				t.Errorf("after the takeover node-1 turns unhealthy at +%s, want +%s (silence counted from +%s)",
					got.Sub(t0), want.Sub(t0), from.Sub(t0))
			}
			if got.Before(watched) {
				t.Errorf("below the floor: unhealthy at +%s, before this replica's own evidence allows (+%s)", got.Sub(t0), watched.Sub(t0))
			}
		})
	}
}
