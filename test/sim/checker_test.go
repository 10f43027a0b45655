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
