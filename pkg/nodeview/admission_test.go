package nodeview

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
)

// TestClaimEnds: a claim counts its node as fencing and its start against the rate
// limit until the cache shows the incident past Pending and Held; from then on the cached
// incident alone counts, once.
func TestClaimEnds(t *testing.T) {
	now := fixture.T0.Add(time.Minute)
	a := &Admission{claims: map[string]claim{"node-1-x0": {node: "node-1", at: now}}}
	for _, tc := range []struct {
		phase   v1alpha1.Phase
		fencing bool
		starts  int
		claimed bool
	}{
		{v1alpha1.PhasePending, true, 1, true},
		{v1alpha1.PhaseHeld, true, 1, true},
		{v1alpha1.PhaseFencing, true, 1, false},
		{v1alpha1.PhaseFenced, false, 1, false},
	} {
		a.claims = map[string]claim{"node-1-x0": {node: "node-1", at: now}}
		nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-1-x0"},
			Spec: v1alpha1.NodeFenceSpec{NodeName: "node-1"}, Status: v1alpha1.NodeFenceStatus{Phase: tc.phase}}
		if tc.phase == v1alpha1.PhaseFencing || tc.phase == v1alpha1.PhaseFenced {
			incidents.AddStep(&nf.Status, now, v1alpha1.StepFenceStarted, "")
		}
		fencing, starts := a.fencingFacts([]*v1alpha1.NodeFence{nf}, time.Minute, now)
		_, claimed := a.claims["node-1-x0"]
		if fencing["node-1"] != tc.fencing || len(starts) != tc.starts || claimed != tc.claimed {
			t.Errorf("cached at %s: fencing %t, %d starts, claim kept %t; want %t, %d, %t",
				tc.phase, fencing["node-1"], len(starts), claimed, tc.fencing, tc.starts, tc.claimed)
		}
	}
	// Outside the rate window a claim still counts its node as fencing.
	a.claims = map[string]claim{"node-1-x0": {node: "node-1", at: now}}
	if fencing, starts := a.fencingFacts(nil, time.Minute, now.Add(2*time.Minute)); !fencing["node-1"] || len(starts) != 0 {
		t.Errorf("an old claim: fencing %t, %d starts; want true, 0", fencing["node-1"], len(starts))
	}
}

// TestClaimForcedAndUnclaim: a forced fence counts until its incident is deleted.
func TestClaimForcedAndUnclaim(t *testing.T) {
	var a Admission
	now := fixture.T0
	a.ClaimForced("node-1-x0", "node-1", now)
	if n := a.FencingNow(nil, now); n != 1 {
		t.Errorf("after a forced claim: %d fencing, want 1", n)
	}
	a.Unclaim("node-1-x0")
	if n := a.FencingNow(nil, now); n != 0 {
		t.Errorf("after unclaim: %d fencing, want 0", n)
	}
}
