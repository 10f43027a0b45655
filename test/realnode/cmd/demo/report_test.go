package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/test/realnode"
	"github.com/kubefence/kubefence/test/sim"
)

// TestRunsTablePodsReleased: the report gives each run's span to its pods released (every
// phase but reschedule) and their p50 and p99, as the targets for released are stated.
func TestRunsTablePodsReleased(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	run := func(node string, detect, reschedule time.Duration) outcome {
		ph := map[string]time.Duration{"detect": detect, "decide": 100 * time.Millisecond, "fence": 300 * time.Millisecond,
			"verify": 100 * time.Millisecond, "remediate": 200 * time.Millisecond, "reschedule": reschedule}
		var total time.Duration
		for _, d := range ph {
			total += d
		}
		return outcome{recovery: sim.Recovery{Node: node, Phases: ph, Total: total},
			failure: &realnode.Failure{Began: t0, Off: t0.Add(detect), Detached: t0.Add(detect), Attached: t0.Add(detect)}}
	}
	var b strings.Builder
	runsTable(&b, []outcome{run("node-1", 2*time.Second, 2*time.Second), run("node-2", 4*time.Second, time.Second)})
	out := b.String()
	for _, want := range []string{
		"Pods released (from the failure to the end of the release, before `reschedule`): p50 **2.7s**, p99 **4.7s**.",
		"| 1 | node-1 | 4.7s | 2.0s | 0.1s | 0.3s | 0.1s | 0.2s | 2.0s | 2.7s |",
		"| 2 | node-2 | 5.7s | 4.0s | 0.1s | 0.3s | 0.1s | 0.2s | 1.0s | 4.7s |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
