package sim

import (
	"testing"
	"time"

	"github.com/kubefence/kubefence/test/sim/bmc"
)

// TestCheckRenewingNotFenced: the checker flags a power-off that lands while the kubelet
// still renews on time, and only that.
func TestCheckRenewingNotFenced(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	renewals := []time.Time{t0, t0.Add(time.Second), t0.Add(2 * time.Second)}
	for name, tc := range map[string]struct {
		event     bmc.PowerEvent
		halts     []time.Time
		violation bool
	}{
		"off 500ms after a renewal":       {bmc.PowerEvent{Time: t0.Add(2500 * time.Millisecond), Action: bmc.ActionOff, Source: "bmc"}, nil, true},
		"off requested 1s after one":      {bmc.PowerEvent{Time: t0.Add(3 * time.Second), Action: bmc.ActionOffRequested, Source: "bmc"}, nil, true},
		"off 5s after the last renewal":   {bmc.PowerEvent{Time: t0.Add(7 * time.Second), Action: bmc.ActionOff, Source: "bmc"}, nil, false},
		"power loss by the simulation":    {bmc.PowerEvent{Time: t0.Add(2500 * time.Millisecond), Action: bmc.ActionOff, Source: "sim"}, nil, false},
		"power on is no fence":            {bmc.PowerEvent{Time: t0.Add(2500 * time.Millisecond), Action: bmc.ActionOn, Source: "bmc"}, nil, false},
		"before the kubelet ever renewed": {bmc.PowerEvent{Time: t0.Add(-time.Second), Action: bmc.ActionOff, Source: "bmc"}, nil, false},
		"halted, off 1.5s after the last renewal": {bmc.PowerEvent{Time: t0.Add(3500 * time.Millisecond), Action: bmc.ActionOff, Source: "bmc"},
			[]time.Time{t0.Add(2100 * time.Millisecond)}, false},
		"halted, off 1s after the last renewal": {bmc.PowerEvent{Time: t0.Add(3 * time.Second), Action: bmc.ActionOff, Source: "bmc"},
			[]time.Time{t0.Add(2100 * time.Millisecond)}, true},
		"halted before that renewal": {bmc.PowerEvent{Time: t0.Add(3500 * time.Millisecond), Action: bmc.ActionOff, Source: "bmc"},
			[]time.Time{t0.Add(1500 * time.Millisecond)}, true},
	} {
		t.Run(name, func(t *testing.T) {
			v := CheckRenewingNotFenced("node-1", renewals, []bmc.PowerEvent{tc.event}, tc.halts, 2*time.Second, 1250*time.Millisecond)
			if (len(v) > 0) != tc.violation {
				t.Errorf("violations %v, want one: %v", v, tc.violation)
			}
		})
	}
}

// TestCheckOneOffAtATime: the checker flags a power-off asked while an earlier one the
// BMC took is still pending, and nothing else: an off after the first landed, the
// simulation's own power changes, and a power-on between are not.
func TestCheckOneOffAtATime(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	ev := func(ms int, action, source string) bmc.PowerEvent {
		return bmc.PowerEvent{Time: t0.Add(time.Duration(ms) * time.Millisecond), Action: action, Source: source}
	}
	for name, tc := range map[string]struct {
		log       []bmc.PowerEvent
		violation bool
	}{
		"a second off while the first is pending": {[]bmc.PowerEvent{ev(0, bmc.ActionOffRequested, "bmc"), ev(1000, bmc.ActionOffRequested, "bmc"),
			ev(3000, bmc.ActionOff, "bmc"), ev(4000, bmc.ActionOff, "bmc")}, true},
		"a second off after the first landed": {[]bmc.PowerEvent{ev(0, bmc.ActionOffRequested, "bmc"), ev(3000, bmc.ActionOff, "bmc"),
			ev(9000, bmc.ActionOffRequested, "bmc"), ev(12000, bmc.ActionOff, "bmc")}, false},
		"the first still pending after a power on": {[]bmc.PowerEvent{ev(0, bmc.ActionOffRequested, "bmc"), ev(1000, bmc.ActionOn, "bmc"),
			ev(2000, bmc.ActionOffRequested, "bmc")}, true},
		"the simulation's own changes": {[]bmc.PowerEvent{ev(0, bmc.ActionOffRequested, "sim"), ev(1000, bmc.ActionOffRequested, "bmc")}, false},
		"one off":                      {[]bmc.PowerEvent{ev(0, bmc.ActionOffRequested, "bmc"), ev(3000, bmc.ActionOff, "bmc")}, false},
	} {
		t.Run(name, func(t *testing.T) {
			v := CheckOneOffAtATime("node-1", tc.log)
			if (len(v) > 0) != tc.violation {
				t.Errorf("violations %v, want one: %v", v, tc.violation)
			}
		})
	}
}
