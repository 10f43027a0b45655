package releasegate

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("%s: not within 30s", what)
	}
}

// TestReleaseGateYield: a record waits while another incident is under way, and goes
// when that one leaves the gate, when a node waits for a worker, or at the gate's
// longest wait, whichever comes first.
func TestReleaseGateYield(t *testing.T) {
	for name, tc := range map[string]struct {
		waiting int
		max     time.Duration
		// release: another incident leaves the gate while the record waits.
		release bool
		// atLeast: the record waited at least this long.
		atLeast time.Duration
	}{
		"until the other release is done": {max: time.Hour, release: true},
		"not while a node waits":          {waiting: 1, max: time.Hour},
		"at most the gate's longest wait": {max: 50 * time.Millisecond, atLeast: 50 * time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			g := &Gate{Max: tc.max}
			g.Enter() // another incident under way
			g.Enter() // the caller's own sync
			done := make(chan time.Duration, 1)
			go func() { done <- g.Yield(context.Background(), func() int { return tc.waiting }) }()
			if tc.release {
				pollUntil(t, "the record held back", func() bool { return g.Holding() == 1 })
				select {
				case d := <-done:
					t.Fatalf("the record went after %s, with the other release under way", d)
				default:
				}
				g.Leave()
			}
			var waited time.Duration
			pollUntil(t, "the record let go", func() bool {
				select {
				case waited = <-done:
					return true
				default:
					return false
				}
			})
			if waited < tc.atLeast {
				t.Errorf("waited %s, want at least %s", waited, tc.atLeast)
			}
			g.mu.Lock()
			busy, waiters := g.busy, g.waiters
			g.mu.Unlock()
			want := 2
			if tc.release {
				want = 1
			}
			if busy != want {
				t.Errorf("busy %d after the wait, want %d (the caller counted again)", busy, want)
			}
			if waiters != 0 {
				t.Errorf("%d records still held", waiters)
			}
		})
	}
}

// TestReleaseGateStopsWithContext: a replica that stops leading stops holding records
// back; the save that follows fails on its own.
func TestReleaseGateStopsWithContext(t *testing.T) {
	g := &Gate{Max: time.Hour}
	g.Enter()
	g.Enter()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Yield(ctx, func() int { return 0 }); close(done) }()
	pollUntil(t, "the record held back", func() bool { return g.Holding() == 1 })
	cancel()
	pollUntil(t, "the record let go", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
}
