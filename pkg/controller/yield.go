package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// releaseGate lets a storm's releases go before its records. In a storm the API server is
// what every incident waits for, and the write that records a release (Remediated, with
// its Event) does nothing for the workloads: they were released by the taints and
// deletions before it. So when eventStormAt nodes are fencing, an incident whose release
// is done holds its record back while other incidents of this replica are on their way
// to theirs, for at most recordYield, and never while a node waits for a worker. The
// worker keeps the node meanwhile: no other sync of it starts, and the record goes out
// with the same resourceVersion a save at once would have had.
//
// The bound it never crosses: the record of a release trails it by at most recordYield,
// however long the others take (TestReleaseGateYield holds another incident under way for
// good). A replica deposed meanwhile writes nothing: the save follows
// a Lease check as every save does, and the new leader resumes from the status written
// ahead of the agent call, which this never delays.
type releaseGate struct {
	mu sync.Mutex
	// busy counts the syncs of nodes with an incident under way (or about to open one),
	// the ones whose writes free workloads.
	busy int
	// waiters counts the records held back now.
	waiters int
	// changed is closed, and replaced, whenever busy drops.
	changed chan struct{}
	// max is the longest a record is held back; zero means recordYield.
	max time.Duration
}

// recordYield is the longest a release's record waits for other incidents' releases;
// yieldRecheck how often a waiting record looks for nodes queued for a worker.
const (
	recordYield  = time.Second
	yieldRecheck = 20 * time.Millisecond
)

// gateKey marks a context whose sync entered the gate.
type gateKey struct{}

// enter counts a sync of a node with an incident under way; leave ends it.
func (g *releaseGate) enter() {
	g.mu.Lock()
	g.busy++
	g.mu.Unlock()
}

func (g *releaseGate) leave() {
	g.mu.Lock()
	g.busy--
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
	g.mu.Unlock()
}

// yield waits, for at most g.max, while other incidents are under way and no node waits
// for a worker (waiting reports how many do), and says how long it waited. The caller is
// one of the busy syncs; it is not counted while it waits.
func (g *releaseGate) yield(ctx context.Context, waiting func() int) time.Duration {
	start := time.Now()
	g.mu.Lock()
	g.waiters++
	max := g.max
	g.mu.Unlock()
	if max <= 0 {
		max = recordYield
	}
	g.leave()
	defer func() {
		g.mu.Lock()
		g.waiters--
		g.mu.Unlock()
		g.enter()
	}()
	timer := time.NewTimer(max)
	defer timer.Stop()
	// A node queued meanwhile may find every worker busy or waiting: look again soon.
	recheck := time.NewTicker(yieldRecheck)
	defer recheck.Stop()
	for {
		g.mu.Lock()
		if g.busy <= 0 || waiting() > 0 {
			g.mu.Unlock()
			return time.Since(start)
		}
		if g.changed == nil {
			g.changed = make(chan struct{})
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-recheck.C:
		case <-timer.C:
			return time.Since(start)
		case <-ctx.Done():
			return time.Since(start)
		}
	}
}

// yieldToReleases holds the record of a release back while a storm's other releases are
// under way (releaseGate); outside a storm, or in a sync that did not enter the gate, it
// returns at once.
func (c *Controller) yieldToReleases(ctx context.Context) {
	if entered, _ := ctx.Value(gateKey{}).(bool); !entered {
		return
	}
	if c.decide.admission.fencingNow(c.store.Cached(), c.now()) < eventStormAt {
		return
	}
	waited := c.decide.gate.yield(ctx, c.queue.Len)
	klog.FromContext(ctx).V(2).Info("Release recorded after the storm's other releases", "waited", waited)
}

// holding reports how many records are held back now.
func (g *releaseGate) holding() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiters
}
