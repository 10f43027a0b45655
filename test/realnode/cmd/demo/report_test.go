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
			failure: &realnode.Failure{Began: t0, Off: t0.Add(detect), Detached: t0.Add(detect), Attached: t0.Add(detect)},
			kubelet: realnode.PodStart{Reached: t0.Add(detect), Verified: t0.Add(detect + reschedule/2)}}
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

// TestRunsTableKubeletWait: each run gives the new kubelet's wait for its volume, marked
// when the node authorizer refused it the claim; the summary gives that wait's share, the
// total less it, and the totals of the runs not held back.
func TestRunsTableKubeletWait(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 13, 20, 0, 0, time.UTC)
	run := func(total, wait time.Duration, refused bool) outcome {
		k := realnode.PodStart{Reached: t0.Add(total - wait - time.Second), Verified: t0.Add(total - time.Second)}
		if refused {
			k.Refused = k.Reached
		}
		return outcome{recovery: sim.Recovery{Node: "node-3", Total: total, Phases: map[string]time.Duration{}},
			failure: &realnode.Failure{Began: t0}, kubelet: k}
	}
	var b strings.Builder
	runsTable(&b, []outcome{run(42*time.Second, 19700*time.Millisecond, true), run(30*time.Second, 1500*time.Millisecond, false),
		run(32*time.Second, 9*time.Second, false)})
	out := b.String()
	for _, want := range []string{
		`("kubelet's wait", Kubernetes'; see below): p50 9.0s, p99 19.7s; the total less that wait: p50 23.0s, p99 28.5s.`,
		"refused the kubelet the pod's claim in 1 of 3 runs (†); the total of the others: p50 30.0s, p99 32.0s.",
		"| 19.7s † | ", "| 1.5s | ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	runsTable(&b, []outcome{run(30*time.Second, 1500*time.Millisecond, false)})
	if out := b.String(); !strings.Contains(out, "refused no kubelet the pod's claim.") || strings.Contains(out, "†") {
		t.Errorf("a run without a refusal reported as one:\n%s", out)
	}
}
