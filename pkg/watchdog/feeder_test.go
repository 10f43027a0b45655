package watchdog

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeDevice records what a Feeder does to it.
type fakeDevice struct {
	mu      sync.Mutex
	calls   []string
	timeout time.Duration // what Arm reports in force
	armErr  error
	feedErr error
}

func (d *fakeDevice) record(c string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, c)
}

func (d *fakeDevice) Arm(time.Duration) (time.Duration, error) {
	d.record("arm")
	return d.timeout, d.armErr
}

func (d *fakeDevice) Feed() error {
	d.record("feed")
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.feedErr
}

func (d *fakeDevice) Disarm() error { d.record("disarm"); return nil }

func (d *fakeDevice) got() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.calls, ",")
}

// feederRun starts f on a fake clock and returns the clock, a cancel and a channel with
// Run's result.
func feederRun(t *testing.T, f *Feeder) (*testingclock.FakeClock, context.CancelFunc, chan error) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC))
	f.Clock = clk
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(cancel)
	return clk, cancel, done
}

// until polls cond with a deadline.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestFeederFeedsAtAThird: the device is fed at once and then every third of the timeout
// in force (6s here, though 5s was asked for: the driver's rounding decides).
func TestFeederFeedsAtAThird(t *testing.T) {
	dev := &fakeDevice{timeout: 6 * time.Second}
	f := &Feeder{Dev: dev, Timeout: 5 * time.Second, Live: func(time.Time) string { return "" }}
	clk, cancel, done := feederRun(t, f)
	until(t, "the first feed", func() bool { return dev.got() == "arm,feed" })
	for i := range 3 {
		until(t, "the feeder waiting on its ticker", clk.HasWaiters)
		clk.Step(2*time.Second - time.Millisecond)
		if got := strings.Count(dev.got(), "feed"); got != i+1 {
			t.Fatalf("fed %d times before a third of the timeout passed, want %d", got, i+1)
		}
		clk.Step(time.Millisecond)
		until(t, "a feed", func() bool { return strings.Count(dev.got(), "feed") == i+2 })
	}
	if st := f.State(); !st.Armed || st.Timeout != 6*time.Second || st.Stopped != "" || !st.LastFed.Equal(clk.Now()) {
		t.Errorf("state %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(dev.got(), ",disarm") || f.State().Armed {
		t.Errorf("a shutdown while the node may live: calls %s, state %+v; want a disarm", dev.got(), f.State())
	}
}

// TestFeederStopsForGood: once Live says the node must not live on, the feeder never
// feeds again, even if Live changes its mind, and a shutdown does not disarm.
func TestFeederStopsForGood(t *testing.T) {
	dev, live, f, clk, cancel, done := feeding(t)
	live.set("NodeFence node-1-x1 wants this node fenced")
	until(t, "the feeder waiting on its ticker", clk.HasWaiters)
	clk.Step(time.Second)
	until(t, "the stop", func() bool { return f.State().Stopped != "" })
	live.set("")
	for range 5 {
		clk.Step(time.Second)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := dev.got(); got != "arm,feed" {
		t.Errorf("calls %s after the stop, want arm,feed only", got)
	}
	if st := f.State(); st.Stopped != "NodeFence node-1-x1 wants this node fenced" || !st.Armed {
		t.Errorf("state %+v", st)
	}
}

// TestFeederShutdownOfAnIsolatedNode: an agent shut down (a liveness probe, a roll) while
// Live says the node must not live on leaves the device armed: the node resets.
func TestFeederShutdownOfAnIsolatedNode(t *testing.T) {
	dev, live, f, _, cancel, done := feeding(t)
	live.set("no API server and no peer for 10s")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, st := dev.got(), f.State(); got != "arm,feed" || st.Stopped != "no API server and no peer for 10s" || !st.Armed {
		t.Errorf("calls %s, state %+v; want no disarm, stopped", got, st)
	}
}

// TestFeederFeedErrors: a failed feed is reported and the next tick tries again; an Arm
// that fails is Run's error.
func TestFeederFeedErrors(t *testing.T) {
	dev := &fakeDevice{timeout: 3 * time.Second, feedErr: errors.New("keepalive: input/output error")}
	f := &Feeder{Dev: dev, Timeout: 3 * time.Second, Live: func(time.Time) string { return "" }}
	clk, _, _ := feederRun(t, f)
	until(t, "a failed feed", func() bool { return strings.Contains(f.State().FeedError, "input/output error") })
	dev.mu.Lock()
	dev.feedErr = nil
	dev.mu.Unlock()
	until(t, "the feeder waiting on its ticker", clk.HasWaiters)
	clk.Step(time.Second)
	until(t, "a feed that works", func() bool { st := f.State(); return st.FeedError == "" && !st.LastFed.IsZero() })

	bad := &Feeder{Dev: &fakeDevice{armErr: errors.New("watchdog /dev/watchdog: open: permission denied")}, Timeout: 3 * time.Second,
		Live: func(time.Time) string { return "" }}
	if err := bad.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("Run with a device that does not arm: %v", err)
	}
	if st := bad.State(); st.Armed || st.Stopped != "not armed: watchdog /dev/watchdog: open: permission denied" {
		t.Errorf("after a failed Arm: armed %v, stopped %q; want not armed, and why in the report", st.Armed, st.Stopped)
	}
}

// TestFeederArmsOnlyOnceLive: an agent that starts cut off, or on a node the cluster
// wants fenced, does not open the device (opening feeds a countdown still running from
// before); it arms once Live allows.
func TestFeederArmsOnlyOnceLive(t *testing.T) {
	dev := &fakeDevice{timeout: 3 * time.Second}
	live := &liveSwitch{why: "node-1 is cut off: no read from the API server never"}
	f := &Feeder{Dev: dev, Timeout: 3 * time.Second, Live: live.Live}
	clk, cancel, done := feederRun(t, f)
	until(t, "the feeder waiting to arm", func() bool { return clk.HasWaiters() && strings.HasPrefix(f.State().Stopped, "not armed yet: ") })
	clk.Step(time.Second)
	until(t, "the feeder waiting again", clk.HasWaiters)
	if got := dev.got(); got != "" {
		t.Fatalf("calls %s while Live forbids; want none", got)
	}
	live.set("")
	clk.Step(time.Second)
	until(t, "the arm and first feed", func() bool { return dev.got() == "arm,feed" })
	if st := f.State(); !st.Armed || st.Stopped != "" {
		t.Errorf("state %+v after arming", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// feeding starts a Feeder whose Live the test switches, and waits for its first feed.
func feeding(t *testing.T) (*fakeDevice, *liveSwitch, *Feeder, *testingclock.FakeClock, context.CancelFunc, chan error) {
	dev := &fakeDevice{timeout: 3 * time.Second}
	live := &liveSwitch{}
	f := &Feeder{Dev: dev, Timeout: 3 * time.Second, Live: live.Live}
	clk, cancel, done := feederRun(t, f)
	until(t, "the first feed", func() bool { return dev.got() == "arm,feed" })
	return dev, live, f, clk, cancel, done
}

// liveSwitch is a Live whose answer the test changes.
type liveSwitch struct {
	mu  sync.Mutex
	why string
}

func (l *liveSwitch) Live(time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.why
}

func (l *liveSwitch) set(why string) {
	l.mu.Lock()
	l.why = why
	l.mu.Unlock()
}

// stuckDevice is a fakeDevice that cannot be disarmed (nowayout).
type stuckDevice struct{ *fakeDevice }

func (stuckDevice) Nowayout() bool { return true }

// TestFeederReportsBeforeItDisarms: an agent stopped while its node may live reports
// that it disarms, and disarms only once that report is written; when it cannot be, the
// countdown runs on, unfed, and says why. A controller that read "armed" last must never
// count a node reset whose watchdog was disarmed behind its back.
func TestFeederReportsBeforeItDisarms(t *testing.T) {
	for name, tc := range map[string]struct {
		reportErr error
		calls     string
		armed     bool
		stopped   string
	}{
		"the report is written": {calls: "arm,feed,report,disarm"},
		"the report fails": {reportErr: errors.New("Put https://apiserver/...: connection refused"), calls: "arm,feed,report", armed: true,
			stopped: "the agent stopped, and could not report that it disarms (Put https://apiserver/...: connection refused): the countdown runs on, and resets the node within 3s unless a new agent feeds it"},
	} {
		t.Run(name, func(t *testing.T) {
			dev := &fakeDevice{timeout: 3 * time.Second}
			f := &Feeder{Dev: dev, Timeout: 3 * time.Second, Live: func(time.Time) string { return "" },
				Disarming: func() error { dev.record("report"); return tc.reportErr }}
			_, cancel, done := feederRun(t, f)
			until(t, "the first feed", func() bool { return dev.got() == "arm,feed" })
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if st := f.State(); dev.got() != tc.calls || st.Armed != tc.armed || st.Stopped != tc.stopped {
				t.Errorf("calls %s, state %+v; want calls %s, armed %t, stopped %q", dev.got(), st, tc.calls, tc.armed, tc.stopped)
			}
		})
	}
}

// TestFeederNowayoutStaysArmed: a device that cannot be disarmed is fed once more when
// the agent stops, and left armed for the next agent; nothing claims it disarmed.
func TestFeederNowayoutStaysArmed(t *testing.T) {
	dev := stuckDevice{&fakeDevice{timeout: 3 * time.Second}}
	f := &Feeder{Dev: dev, Timeout: 3 * time.Second, Live: func(time.Time) string { return "" },
		Disarming: func() error { dev.record("report"); return nil }}
	_, cancel, done := feederRun(t, f)
	until(t, "the first feed", func() bool { return dev.got() == "arm,feed" })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := f.State(); dev.got() != "arm,feed,feed" || !st.Armed || !strings.Contains(st.Stopped, "cannot be disarmed (nowayout)") {
		t.Errorf("calls %s, state %+v; want one more feed, no report, no disarm, armed", dev.got(), st)
	}
}

// TestFeederFeedsADeviceLeftCounting: an Arm that failed on a device it cannot stop
// (CountingError) is reported, never as armed, and the device is fed at a third of the
// timeout it counts while the node may live: a refused timeout must not reset the node
// at every boot. Once Live says no, the feeding stops.
func TestFeederFeedsADeviceLeftCounting(t *testing.T) {
	dev := &fakeDevice{armErr: &CountingError{Err: errors.New("watchdog /dev/watchdog: set timeout 5s: invalid argument"), Timeout: time.Minute}}
	live := &liveSwitch{}
	f := &Feeder{Dev: dev, Timeout: 5 * time.Second, Live: live.Live}
	clk, _, done := feederRun(t, f)
	until(t, "the first feed", func() bool { return dev.got() == "arm,feed" })
	until(t, "the feeder waiting on its ticker", clk.HasWaiters)
	clk.Step(20 * time.Second)
	until(t, "a feed 20s later", func() bool { return dev.got() == "arm,feed,feed" })
	st := f.State()
	if st.Armed || !st.Counting || !strings.Contains(st.Stopped, "not armed: watchdog /dev/watchdog: set timeout 5s: invalid argument: the device counts down anyway") {
		t.Errorf("state %+v; want not armed, counting, and why", st)
	}
	live.set("the cluster wants node a fenced")
	until(t, "the feeder waiting on its ticker", clk.HasWaiters)
	clk.Step(20 * time.Second)
	if err := <-done; err == nil {
		t.Error("Run returned no error after a failed Arm")
	}
	if st := f.State(); dev.got() != "arm,feed,feed" || !strings.HasSuffix(st.Stopped, "; feeding stopped: the cluster wants node a fenced") {
		t.Errorf("calls %s, state %+v; want no more feeds once Live says no", dev.got(), st)
	}
}
