package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/test/sim/bmc"
)

// TestRoundViolations: the checks BenchmarkIncidentCost runs on every round find a
// release before the Fence call, a second incident, overlapping calls and a release the
// watch did not see.
func TestRoundViolations(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	fenced := func(at time.Time) *instantAgent {
		a := newInstantAgent()
		a.calls["r0-node-0"] = []bmc.PowerEvent{{Time: at, Action: bmc.ActionOff, Source: "agent"}}
		return a
	}
	tainted := []Seen{{At: t0.Add(time.Second), Kind: SeenTaintAdded, Node: "r0-node-0"}}
	one := map[string]int{"r0-node-0": 1}
	if v := roundViolations(tainted, fenced(t0), "r0-", one); len(v) != 0 {
		t.Errorf("a clean round: %q", v)
	}
	overlapping := fenced(t0)
	overlapping.overlaps = []string{"2 Fence calls in flight"}
	for name, tc := range map[string]struct {
		seen    []Seen
		agent   *instantAgent
		perNode map[string]int
		want    string
	}{
		"taint before the call": {tainted, fenced(t0.Add(2 * time.Second)), one, "before its BMC logged power off"},
		"two incidents":         {tainted, fenced(t0), map[string]int{"r0-node-0": 2}, "2 incidents for node r0-node-0"},
		"overlapping calls":     {tainted, overlapping, one, "2 Fence calls in flight"},
		"a release unseen":      {nil, fenced(t0), one, "on 0 of 1 nodes"},
	} {
		v := roundViolations(tc.seen, tc.agent, "r0-", tc.perNode)
		if !strings.Contains(strings.Join(v, "\n"), tc.want) {
			t.Errorf("%s: violations %q, want one saying %q", name, v, tc.want)
		}
	}
}
