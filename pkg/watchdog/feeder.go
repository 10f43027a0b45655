package watchdog

import (
	"context"
	"errors"
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
	// Disarming, when set, is called when the agent stops while Live still lets the node
	// live, before the device is disarmed: the agent's report that it disarms. The device
	// is disarmed only once it returned nil; otherwise the countdown runs on, and resets
	// the node unless a new agent feeds it in time. A controller that read "armed" last
	// must never count a node reset whose watchdog was disarmed.
	Disarming func() error
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
	// Counting is true once a device whose Arm failed counts down anyway (nowayout,
	// CountingError): it is fed, unarmed, while the node may live (Stopped says when that
	// ended).
	Counting bool
}

// State returns the feeder's state now.
func (f *Feeder) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

// Run arms the device once Live allows, and feeds it every third of the timeout in force
// while Live says so. When ctx ends it disarms the device only if Live, asked once more,
// still lets the node live, and Disarming (the report that it disarms) succeeded: a node
// that the cluster wants fenced, or that is cut off, must reset even if its agent is
// being shut down (a liveness probe that kills the agent of an isolated node must not
// save the node from its fence), and one whose last report said "armed" must not be
// disarmed behind the controller's back. A device that cannot be disarmed (nowayout) is
// fed once more and left counting, for the next agent to feed.
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
		// refuses the timeout, shows in the report and in why the watchdog level
		// refuses the node, not only in the agent's log.
		var counting *CountingError
		isCounting := errors.As(err, &counting)
		f.mu.Lock()
		f.st.Stopped, f.st.Counting = "not armed: "+err.Error(), isCounting
		f.mu.Unlock()
		if isCounting {
			f.feedCounting(ctx, clk, counting.Timeout)
		}
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
			return f.shutdown(clk.Now(), timeout)
		case <-tick.C():
		}
	}
}

// shutdown ends the feeding of an armed device when the agent stops.
func (f *Feeder) shutdown(now time.Time, timeout time.Duration) error {
	if why := f.Live(now); why != "" {
		f.stop(why)
		return nil
	}
	if s, ok := f.Dev.(Stuck); ok && s.Nowayout() {
		f.feed(now)
		f.stop(fmt.Sprintf("the agent stopped; the device cannot be disarmed (nowayout): it resets the node within %s unless a new agent feeds it", timeout))
		return nil
	}
	if f.Disarming != nil {
		if err := f.Disarming(); err != nil {
			f.stop(fmt.Sprintf("the agent stopped, and could not report that it disarms (%v): the countdown runs on, and resets the node within %s unless a new agent feeds it", err, timeout))
			return nil
		}
	}
	return f.disarm()
}

// feedCounting feeds a device whose Arm failed but which counts down anyway, while Live
// allows, every third of its timeout (every second when it would not say): the failed
// Arm must not reset the node, and the device is never reported armed.
func (f *Feeder) feedCounting(ctx context.Context, clk clock.WithTicker, timeout time.Duration) {
	every := time.Second
	if timeout >= 3*time.Second {
		every = timeout / 3
	}
	tick := clk.NewTicker(every)
	defer tick.Stop()
	for {
		if why := f.Live(clk.Now()); why != "" {
			f.mu.Lock()
			f.st.Stopped += "; feeding stopped: " + why
			f.mu.Unlock()
			return
		}
		if err := f.Dev.Feed(); err != nil {
			f.mu.Lock()
			f.st.FeedError = err.Error()
			f.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
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
