package fencer

import "github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"

// phaseMoves are every phase an incident may move to from each phase; "" is an incident
// whose status was never written. A phase that is not a key ends the incident.
//
//	"" ──▶ Pending ◀─▶ Held ──▶ Fencing ──▶ Fenced ──▶ Remediated ──▶ Recovered
//	            │        │          │
//	            └────────┴─▶ Cancelled (a sign of life before any fence)
//	                                └─▶ Failed (every level failed; nothing released)
//	                                └─▶ Held (a device is another machine's: TargetMismatch)
//
// Pending and Held move to themselves when the reason for not fencing yet changes. A
// person's word adds two ways (pkg/oncall): confirm-off moves Pending, Held, Fencing and
// Failed to Fenced (a person's word stands in for the read back), and a cancel of the
// incident of a node whose Node object is gone closes it Recovered (decommissioned) from
// any phase but an ended one. A person's cancel of an incident that sent no fence ends it
// Cancelled, as a sign of life does.
var phaseMoves = map[v1alpha1.Phase][]v1alpha1.Phase{
	"":                    {v1alpha1.PhasePending, v1alpha1.PhaseHeld, v1alpha1.PhaseFencing, v1alpha1.PhaseCancelled, v1alpha1.PhaseRecovered},
	v1alpha1.PhasePending: {v1alpha1.PhasePending, v1alpha1.PhaseHeld, v1alpha1.PhaseFencing, v1alpha1.PhaseCancelled, v1alpha1.PhaseFenced, v1alpha1.PhaseRecovered},
	v1alpha1.PhaseHeld:    {v1alpha1.PhasePending, v1alpha1.PhaseHeld, v1alpha1.PhaseFencing, v1alpha1.PhaseCancelled, v1alpha1.PhaseFenced, v1alpha1.PhaseRecovered},
	// Held: a fence device proved another machine's before anything was sent (Mismatched).
	// Cancelled: a person's cancel of an incident whose first call a pause held, none sent.
	v1alpha1.PhaseFencing: {v1alpha1.PhaseFenced, v1alpha1.PhaseFailed, v1alpha1.PhaseRecovered, v1alpha1.PhaseHeld, v1alpha1.PhaseCancelled},
	// A node that booted anew before its release is not released (podrelease.ErrNodeRebooted):
	// Remediated then records that nothing was.
	v1alpha1.PhaseFenced:     {v1alpha1.PhaseRemediated, v1alpha1.PhaseRecovered},
	v1alpha1.PhaseRemediated: {v1alpha1.PhaseRecovered},
	v1alpha1.PhaseFailed:     {v1alpha1.PhaseFenced, v1alpha1.PhaseRecovered},
}

// CanMove reports whether an incident in phase from may move to phase to.
func CanMove(from, to v1alpha1.Phase) bool {
	for _, p := range phaseMoves[from] {
		if p == to {
			return true
		}
	}
	return false
}
