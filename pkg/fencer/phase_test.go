package fencer

import (
	"testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// allPhases are every phase an incident can be in; "" is one whose status was never
// written.
var allPhases = []v1alpha1.Phase{"", v1alpha1.PhasePending, v1alpha1.PhaseHeld, v1alpha1.PhaseFencing, v1alpha1.PhaseFenced,
	v1alpha1.PhaseRemediated, v1alpha1.PhaseRecovered, v1alpha1.PhaseFailed, v1alpha1.PhaseCancelled}

// TestCanMove covers every pair of phases: the moves an incident makes, and that none
// leaves an ended phase (but Failed, on a person's word), goes back to deciding once a
// fence was sent, or releases anything that was not verified fenced (or confirmed off).
func TestCanMove(t *testing.T) {
	phases := allPhases
	allowed := map[[2]v1alpha1.Phase]bool{}
	for _, from := range []v1alpha1.Phase{"", v1alpha1.PhasePending, v1alpha1.PhaseHeld} {
		for _, to := range []v1alpha1.Phase{v1alpha1.PhasePending, v1alpha1.PhaseHeld, v1alpha1.PhaseFencing, v1alpha1.PhaseCancelled} {
			allowed[[2]v1alpha1.Phase{from, to}] = true
		}
	}
	for _, m := range [][2]v1alpha1.Phase{
		{v1alpha1.PhaseFencing, v1alpha1.PhaseFenced}, {v1alpha1.PhaseFencing, v1alpha1.PhaseFailed},
		{v1alpha1.PhaseFenced, v1alpha1.PhaseRemediated}, {v1alpha1.PhaseRemediated, v1alpha1.PhaseRecovered},
		// A person's confirm-off (never from a phase that has not been decided yet) and a
		// decommissioned node's cancel.
		{v1alpha1.PhasePending, v1alpha1.PhaseFenced}, {v1alpha1.PhaseHeld, v1alpha1.PhaseFenced}, {v1alpha1.PhaseFailed, v1alpha1.PhaseFenced},
		{"", v1alpha1.PhaseRecovered}, {v1alpha1.PhasePending, v1alpha1.PhaseRecovered}, {v1alpha1.PhaseHeld, v1alpha1.PhaseRecovered},
		{v1alpha1.PhaseFencing, v1alpha1.PhaseRecovered}, {v1alpha1.PhaseFenced, v1alpha1.PhaseRecovered}, {v1alpha1.PhaseFailed, v1alpha1.PhaseRecovered},
		// A device that proved another machine's before anything was sent (Mismatched):
		// held, and the Lifecycle keeps it held whatever policy says.
		{v1alpha1.PhaseFencing, v1alpha1.PhaseHeld},
		// A person's cancel of an incident whose first call a pause held (none sent).
		{v1alpha1.PhaseFencing, v1alpha1.PhaseCancelled},
	} {
		allowed[m] = true
	}
	n := 0
	for _, from := range phases {
		for _, to := range phases {
			want := allowed[[2]v1alpha1.Phase{from, to}]
			if got := CanMove(from, to); got != want {
				t.Errorf("CanMove(%q, %q) = %v, want %v", from, to, got, want)
			}
			if want {
				n++
			}
			if !from.Open() && from != "" && from != v1alpha1.PhaseFailed && CanMove(from, to) {
				t.Errorf("ended phase %s moves to %s", from, to)
			}
		}
	}
	if n != 27 {
		t.Errorf("%d moves allowed, want 27", n)
	}
}
