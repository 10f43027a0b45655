package fencer

import (
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/policy"
)

// TestTargetMismatchHolds: a Fence (or a read back) that fails TargetMismatch fails its
// attempt and holds the incident where it is: no retry, no next level (which could
// verify through another device and release), not even Done for a level already
// verified; the Lifecycle moves it to Held with reason TargetMismatch, once, and policy
// or a force does not move it on.
func TestTargetMismatchHolds(t *testing.T) {
	plan := twoLevels(v1alpha1.ModeAny)
	mismatch := plugin.Errorf(plugin.KindTargetMismatch, "bmc system GUID a is not the node's systemUUID b")
	for name, kind := range map[string]EventKind{"fence": FenceReturned, "read back": StateRead} {
		t.Run(name, func(t *testing.T) {
			st := &v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Level: 1}
			if err := Apply(st, plan, Event{Kind: FenceIssued, Level: 1, Agent: "ipmi", Try: 1, Target: "10.0.0.9:623"}, t0); err != nil {
				t.Fatal(err)
			}
			if kind == StateRead {
				// Found in flight and read back first.
				st.Attempts[0].State = v1alpha1.AttemptFencing
			}
			ev := Event{Kind: kind, Level: 1, Agent: "ipmi", Try: 1, Err: mismatch, ErrKind: plugin.KindTargetMismatch}
			if err := Apply(st, plan, ev, t0.Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			a := st.Attempts[0]
			if a.State != v1alpha1.AttemptFailed || a.ErrorKind != string(plugin.KindTargetMismatch) || st.Level != 1 {
				t.Fatalf("attempt %+v at level %d, want failed TargetMismatch at level 1", a, st.Level)
			}
			for _, at := range []time.Time{t0.Add(time.Second), t0.Add(time.Hour)} {
				if step := Next(st, plan, at); step.Kind != DoWait || !step.Until.Equal(at) || !strings.Contains(step.Reason, "systemUUID b") {
					t.Errorf("Next at %s = %+v, want a wait that hands over to the Lifecycle", at, step)
				}
			}
			nf := &v1alpha1.NodeFence{Status: *st}
			nf.Status.Leader = "me"
			got := Lifecycle(nf, Facts{Now: t0, Obs: detector.Observation{Health: detector.Unhealthy}})
			if got.Kind != ActNotYet || got.Phase != v1alpha1.PhaseHeld || got.Decision.Reason != v1alpha1.ReasonTargetMismatch || !got.Record ||
				!CanMove(v1alpha1.PhaseFencing, v1alpha1.PhaseHeld) {
				t.Fatalf("Lifecycle from Fencing = %+v, want a recorded hold, reason TargetMismatch", got)
			}
			nf.Status.Phase, nf.Status.Message = v1alpha1.PhaseHeld, got.Decision.Message
			nf.Annotations = map[string]string{v1alpha1.ForceAnnotation: "true"}
			fence := decided(policy.Fence, "", "fence")
			if again := Lifecycle(nf, Facts{Now: t0, Decision: fence}); again.Kind != ActNotYet || again.Phase != v1alpha1.PhaseHeld || again.Record {
				t.Errorf("Lifecycle when held = %+v, want held, nothing new to record, whatever policy and force say", again)
			}
			// A verified level does not release either.
			st.VerifiedLevel = 1
			if step := Next(st, plan, t0); step.Kind != DoWait {
				t.Errorf("Next with a verified level = %+v, want the hold's wait", step)
			}
		})
	}
}
