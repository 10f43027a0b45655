package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/policy"
)

// TestBudgetDecisionsAreAtomic: three dead nodes synced at once by three workers under
// maxConcurrent 1. The informer cache shows none of this replica's writes (a watch
// that lags, here forever), so only the decision itself can count the fence another
// worker has just decided on: exactly one agent call may be running.
func TestBudgetDecisionsAreAtomic(t *testing.T) {
	f, release, entered := budgetFixture(t)
	var returned atomic.Int32
	var wg sync.WaitGroup
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		wg.Go(func() {
			defer returned.Add(1)
			if _, err := f.c.sync(context.Background(), n); err != nil {
				t.Errorf("sync %s: %v", n, err)
			}
		})
	}
	// Every sync has either returned (held by the budget) or is inside its Fence call.
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return entered.Load()+returned.Load() == 3, nil
	})
	running := entered.Load()
	close(release)
	wg.Wait()
	if err != nil {
		t.Fatalf("%d Fence calls entered and %d syncs returned: %v", running, returned.Load(), err)
	}
	if running != 1 {
		t.Errorf("%d Fence calls running at once, maxConcurrent is 1", running)
	}
	held := 0
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		if nf := f.incident(n); nf.Status.Phase == v1alpha1.PhasePending || nf.Status.Phase == v1alpha1.PhaseHeld {
			held++
		}
	}
	if held != 2 {
		t.Errorf("%d incidents waiting for the budget, want 2", held)
	}
}

// TestForcedFenceCounts: a fence a person forced past maxConcurrent is counted by the
// decisions that follow it, though no Fence verdict claimed it and the cache does not
// show it yet: once node-3's fence is done, node-2 still waits for node-1's.
func TestForcedFenceCounts(t *testing.T) {
	forced := fencedIncident(v1alpha1.PhasePending, "")
	forced.Annotations = map[string]string{v1alpha1.ForceAnnotation: "true"}
	other := fencedIncident(v1alpha1.PhaseFencing, v1alpha1.AttemptFencing)
	other.Name, other.Spec.NodeName, other.Labels = "node-3-x0", "node-3", map[string]string{v1alpha1.NodeLabel: "node-3"}
	f, release, entered := budgetFixture(t, forced, other)
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := f.c.sync(context.Background(), "node-1"); err != nil {
			t.Errorf("sync node-1: %v", err)
		}
	})
	defer wg.Wait()
	defer close(release)
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return entered.Load() == 1, nil
	}); err != nil {
		t.Fatalf("node-1's forced fence never called its agent: %v", err)
	}
	done := other.DeepCopy()
	done.Status.Phase = v1alpha1.PhaseFenced
	if err := nfIndexer(f.c).Update(done); err != nil {
		t.Fatal(err)
	}
	pol := &f.c.cfg.Policies[0]
	node, err := f.c.caches.nodes.Get("node-2")
	if err != nil {
		t.Fatal(err)
	}
	pn, _ := f.c.sources().View(pol, node, f.clock.Now())
	d, err := f.c.decision(pol, pn, node, &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-2-x9"}}, f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if d.Verdict != policy.Wait || d.Reason != policy.ReasonMaxConcurrent {
		t.Errorf("node-2 while node-1's forced fence runs: %s %s (%s), want Wait %s", d.Verdict, d.Reason, d.Message, policy.ReasonMaxConcurrent)
	}
}

// budgetFixture: five nodes under maxConcurrent 1 (and no storm limit), node-1 to node-3
// dead, with objs; the agent's Fence calls block until release is closed, and entered
// counts them.
func budgetFixture(t *testing.T, objs ...runtime.Object) (*fixture, chan struct{}, *atomic.Int32) {
	cfg := fixtureConfig()
	all := intstr.FromString("100%")
	cfg.Policies[0].Budget.MaxConcurrent = 1
	cfg.Policies[0].Budget.MaxUnhealthy = &all
	for i := 1; i <= 5; i++ {
		n := fmt.Sprintf("node-%d", i)
		objs = append(objs, fixtureNode(n, "boot-"+n, true), fixtureLease(n, f0))
	}
	f := newFixture(t, cfg, objs...)
	f.clock.Set(f0.Add(time.Minute))
	for _, n := range []string{"node-4", "node-5"} {
		f.cache(fixtureLease(n, f.clock.Now()))
	}
	release := make(chan struct{})
	entered := &atomic.Int32{}
	f.bmc.FenceFunc = func(ctx context.Context) error {
		entered.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return f, release, entered
}
