package releasegate

import (
	"context"
	"sync"
	"time"
)

// Gate counts the syncs of nodes with an incident under way, and holds records back
// while others are busy.
type Gate struct {
	mu sync.Mutex
	// busy counts the syncs of nodes with an incident under way (or about to open one),
	// the ones whose writes free workloads.
	busy int
	// waiters counts the records held back now.
	waiters int
	// changed is closed, and replaced, whenever busy drops.
	changed chan struct{}
	// Max is the longest a record is held back; zero means DefaultMax.
	Max time.Duration
}

// DefaultMax is the longest a release's record waits for other incidents' releases;
// yieldRecheck how often a waiting record looks for nodes queued for a worker.
const (
	DefaultMax   = time.Second
	yieldRecheck = 20 * time.Millisecond
)

// Enter counts a sync of a node with an incident under way; Leave ends it.
func (g *Gate) Enter() {
	g.mu.Lock()
	g.busy++
	g.mu.Unlock()
}

// Leave ends a sync Enter counted.
func (g *Gate) Leave() {
	g.mu.Lock()
	g.busy--
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
	g.mu.Unlock()
}

// Yield waits, for at most g.Max, while other incidents are under way and no node waits
// for a worker (waiting reports how many do), and says how long it waited. The caller is
// one of the busy syncs; it is not counted while it waits.
func (g *Gate) Yield(ctx context.Context, waiting func() int) time.Duration {
	start := time.Now()
	g.mu.Lock()
	g.waiters++
	max := g.Max
	g.mu.Unlock()
	if max <= 0 {
		max = DefaultMax
	}
	g.Leave()
	defer func() {
		g.mu.Lock()
		g.waiters--
		g.mu.Unlock()
		g.Enter()
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

// Holding reports how many records are held back now.
func (g *Gate) Holding() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiters
}
