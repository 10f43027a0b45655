package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

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
			g := &releaseGate{max: tc.max}
			g.enter() // another incident under way
			g.enter() // the caller's own sync
			done := make(chan time.Duration, 1)
			go func() { done <- g.yield(context.Background(), func() int { return tc.waiting }) }()
			if tc.release {
				pollUntil(t, "the record held back", func() bool { return g.holding() == 1 })
				select {
				case d := <-done:
					t.Fatalf("the record went after %s, with the other release under way", d)
				default:
				}
				g.leave()
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
	g := &releaseGate{max: time.Hour}
	g.enter()
	g.enter()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.yield(ctx, func() int { return 0 }); close(done) }()
	pollUntil(t, "the record held back", func() bool { return g.holding() == 1 })
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

// TestRecordYieldsToReleasesInAStorm: with eventStormAt nodes fencing, a released node's
// Remediated record waits for another incident still on its way to its release (the
// taints are on the node before); with fewer, it is written at once.
func TestRecordYieldsToReleasesInAStorm(t *testing.T) {
	for _, storm := range []bool{false, true} {
		t.Run(fmt.Sprintf("storm=%v", storm), func(t *testing.T) {
			f := newFixture(t, fixtureConfig(), threeNodes()...)
			f.now = f0.Add(time.Minute)
			f.renewAllBut("node-1")
			f.c.decide.gate.max = time.Hour
			if storm {
				for i := range eventStormAt {
					f.c.decide.admission.claimForced(fmt.Sprintf("storm-%d", i), fmt.Sprintf("storm-node-%d", i), f.now)
				}
			}
			f.c.decide.gate.enter() // another incident on its way to its release
			done := make(chan error, 1)
			go func() {
				_, err := f.c.sync(context.Background(), "node-1")
				done <- err
			}()
			returned := func() bool {
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("sync: %v", err)
					}
					return true
				default:
					return false
				}
			}
			if storm {
				pollUntil(t, "the record held back", func() bool { return f.c.decide.gate.holding() == 1 })
				if !outOfService(t, f, "node-1") {
					t.Error("the record is held back before the release")
				}
				if phase := f.incident("node-1").Status.Phase; phase == v1alpha1.PhaseRemediated {
					t.Errorf("phase %s while the other release is under way", phase)
				}
				f.c.decide.gate.leave()
			}
			pollUntil(t, "sync returned", returned)
			if phase := f.incident("node-1").Status.Phase; phase != v1alpha1.PhaseRemediated {
				t.Errorf("phase %s, want Remediated", phase)
			}
		})
	}
}

// outOfService reports whether the API server has node's out-of-service taint.
func outOfService(t *testing.T, f *fixture, node string) bool {
	t.Helper()
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, taint := range n.Spec.Taints {
		if taint.Key == corev1.TaintNodeOutOfService {
			return true
		}
	}
	return false
}
