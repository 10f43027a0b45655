package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/test/realnode"
	"github.com/kubefence/kubefence/test/sim"
)

// TestSlowRuns: a run whose reschedule is longer than the new kubelet's status period
// and 5 s is named, with the node the pod went to, so that its cluster's files are kept;
// a run within it is not.
func TestSlowRuns(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 30, 0, 0, time.UTC)
	run := func(to string, reschedule time.Duration) outcome {
		return outcome{recovery: sim.Recovery{Phases: map[string]time.Duration{"reschedule": reschedule}},
			failure: &realnode.Failure{MovedTo: to, Began: t0}}
	}
	res := &result{
		runs:       []outcome{run("node-3", 2*time.Second), run("node-3", 15300*time.Millisecond), run("node-2", 7*time.Second)},
		leaderRuns: []outcome{run("node-4", 7100*time.Millisecond)},
	}
	fast := slowRuns(settings[profileFast], res) // status every 2s: slow beyond 7s
	if len(fast) != 2 || !strings.HasPrefix(fast[0], "run 2: reschedule took 15.3s, more than 7s: web-0 went to node-3") ||
		!strings.HasPrefix(fast[1], "leader's node run 1: reschedule took 7.1s") {
		t.Errorf("fast profile: slow runs %q, want run 2 and leader's node run 1", fast)
	}
	if def := slowRuns(settings[profileDefault], res); len(def) != 1 || !strings.HasPrefix(def[0], "run 2: ") {
		t.Errorf("default profile (status every 10s, slow beyond 15s): slow runs %q, want run 2 only", def)
	}
	// A run the node authorizer held back says so, with the kubelet's times.
	res.runs[1].kubelet = realnode.PodStart{Refused: t0.Add(20 * time.Second), Verified: t0.Add(39700 * time.Millisecond)}
	if def := slowRuns(settings[profileDefault], res); len(def) != 1 ||
		!strings.Contains(def[0], "node-3, whose kubelet the API server's node authorizer refused the pod's claim at 12:30:20.000; it verified the volume at 12:30:39.700") {
		t.Errorf("default profile: slow runs %q, want run 2 with the authorizer's refusal", def)
	}
}
