package watchdog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Feeder arms a device and feeds it while the node may live.
type Feeder struct {
	Dev Device
	// Timeout is the countdown asked for; the device may round it (State.Timeout).
	Timeout time.Duration
	// Live is asked before every feed. It returns "" while the node may live on, or why
	// it must not: the cluster wants it fenced, or it has been cut off from the API
	// server and its peers for too long. A non-empty answer stops the feeding for good.
	Live func(now time.Time) string
	// Clock is the real clock when nil.
	Clock clock.WithTicker

	mu sync.Mutex
	st State
}

// State is what the agent reports of its watchdog in its heartbeat.
type State struct {
	// Armed is true from a successful Arm until a Disarm.
	Armed bool
	// Timeout is the countdown in force.
	Timeout time.Duration
	// LastFed is when the device last took a feed.
	LastFed time.Time
	// Stopped, once set while Armed, is why feeding stopped for good: the machine resets
	// within Timeout of LastFed. Before the device is armed it says why not yet
	// ("not armed yet: ..."), or why arming failed ("not armed: ...").
	Stopped string
	// FeedError is the last failed feed's error, cleared by a feed that works.
	FeedError string
}

// State returns the feeder's state now.
func (f *Feeder) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

// Run arms the device once Live allows, and feeds it every third of the timeout in force
// while Live says so. When ctx ends it disarms the device only if Live, asked once more, still lets the
// node live: a node that the cluster wants fenced, or that is cut off, must reset even if
// its agent is being shut down (a liveness probe that kills the agent of an isolated node
// must not save the node from its fence).
func (f *Feeder) Run(ctx context.Context) error {
	clk := f.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	// Arming starts the countdown, and re-opening a device whose countdown still runs
	// (an agent that died and came back) feeds it: so the device is armed only once Live
	// allows the node to live, as a feed would be.
	wait := clk.NewTicker(f.Timeout / 3)
	for why := f.Live(clk.Now()); why != ""; why = f.Live(clk.Now()) {
		f.mu.Lock()
		f.st.Stopped = "not armed yet: " + why
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			wait.Stop()
			return nil
		case <-wait.C():
		}
	}
	wait.Stop()
	timeout, err := f.Dev.Arm(f.Timeout)
	if err != nil {
		// Reported (State.Stopped), so that a device the agent may not open, or that
		// refuses the timeout, shows in the heartbeat and in why the watchdog level
		// refuses the node, not only in the agent's log.
		f.stop("not armed: " + err.Error())
		return err
	}
	f.mu.Lock()
	f.st = State{Armed: true, Timeout: timeout}
	f.mu.Unlock()
	tick := clk.NewTicker(timeout / 3)
	defer tick.Stop()
	for {
		if f.feed(clk.Now()) {
			<-ctx.Done()
			return nil
		}
		select {
		case <-ctx.Done():
			if why := f.Live(clk.Now()); why != "" {
				f.stop(why)
				return nil
			}
			return f.disarm()
		case <-tick.C():
		}
	}
}

// feed feeds the device if Live allows, and reports whether feeding has stopped.
func (f *Feeder) feed(now time.Time) bool {
	why := f.Live(now)
	f.mu.Lock()
	defer f.mu.Unlock()
	if why != "" {
		f.st.Stopped = why
		return true
	}
	if err := f.Dev.Feed(); err != nil {
		f.st.FeedError = err.Error()
		return false
	}
	f.st.LastFed, f.st.FeedError = now, ""
	return false
}

func (f *Feeder) stop(why string) {
	f.mu.Lock()
	f.st.Stopped = why
	f.mu.Unlock()
}

func (f *Feeder) disarm() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.Dev.Disarm(); err != nil {
		return fmt.Errorf("disarm: %w", err)
	}
	f.st.Armed = false
	return nil
}
