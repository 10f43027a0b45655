package watchdog

import (
	"errors"
	"strings"
	"testing"
	"time"
)

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
