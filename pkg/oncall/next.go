package oncall

import (
	"fmt"
	"io"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/policy"
)

// Next says what happens next to a node whose newest incident is nf (nil: none), whose
// evidence is obs, and whose incident policy would decide d now.
func Next(nf *v1alpha1.NodeFence, obs detector.Observation, d policy.Decision) string {
	if nf != nil {
		if w, ok := Pending(nf); ok {
			return fmt.Sprintf("the leader answers %s at its next sync of the node", w)
		}
	}
	var phase v1alpha1.Phase
	if nf != nil {
		phase = nf.Status.Phase
	}
	switch {
	case phase == v1alpha1.PhaseFailed:
		return fmt.Sprintf("%s; if the node is known to be off, an on-call person's %s on %s releases it, unless a sign of the node's life refuses it (confirm: above)",
			untilNew(nf), v1alpha1.ConfirmOffAnnotation, nf.Name)
	case phase == v1alpha1.PhaseCancelled && CancelledByPerson(nf):
		return untilNew(nf)
	case nf == nil || !phase.Open():
		if obs.Health != detector.Unhealthy {
			return "nothing: the evidence does not say the node is dead"
		}
		return "an incident opens once the leader's own watch of the node's Lease passes the threshold; then " + verdictNext(d)
	case phase == v1alpha1.PhaseFencing:
		return fmt.Sprintf("the leader goes on fencing at level %d; the node's workloads are released once a level reads back as fenced", nf.Status.Level)
	case phase == v1alpha1.PhaseFenced:
		return "the node's workloads are released"
	case phase == v1alpha1.PhaseRemediated:
		return "nothing more: the node is released; the incident closes when the node is back with a new boot ID"
	}
	return verdictNext(d) + " (the leader decides again every few seconds)"
}

// verdictNext says what a decision leads to.
func verdictNext(d policy.Decision) string {
	switch d.Verdict {
	case policy.Fence:
		return "the node is fenced"
	case policy.WouldFence:
		return "dry run: the node would be fenced; nothing is done"
	case policy.Wait:
		return fmt.Sprintf("the node is fenced after %s unless it comes back (%s)", d.Until.UTC().Format(time.RFC3339), d.Reason)
	case policy.Hold:
		return fmt.Sprintf("held by %s%s", d.Reason, holdHints[d.Reason])
	}
	return "nothing"
}

// holdHints say how a person lets a hold go, where one may.
var holdHints = map[string]string{
	policy.ReasonStorm:        "; an on-call person may set " + v1alpha1.ForceAnnotation + "=true on the incident to fence the node anyway",
	policy.ReasonZoneDark:     "; an on-call person may set " + v1alpha1.ForceAnnotation + "=true on the incident to fence the node anyway",
	policy.ReasonStormPending: "; an on-call person may set " + v1alpha1.ForceAnnotation + "=true on the incident to fence the node anyway",
	policy.ReasonPaused:       "; it goes on once every pause request is removed (the entries of the pause ConfigMap, labelled " + v1alpha1.PauseLabel + "=true)",
}

// printer writes lines and keeps the first error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) line(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format+"\n", args...)
	}
}

// incident writes what the leader recorded of nf.
func (p *printer) incident(nf *v1alpha1.NodeFence) {
	st := &nf.Status
	phase := string(st.Phase)
	if phase == "" {
		phase = "not decided yet"
	}
	p.line("incident:  %s, phase %s, opened %s, requested by %s", nf.Name, phase, nf.CreationTimestamp.UTC().Format(time.RFC3339), nf.Spec.RequestedBy)
	if st.Message != "" {
		p.line("  says:    %s", st.Message)
	}
	for _, s := range st.Timeline {
		if s.Type == v1alpha1.StepDetected || s.Type == v1alpha1.StepRequested {
			p.line("  %s: %s", s.Type, s.Message)
			break
		}
	}
	if n := len(st.Timeline); n > 0 {
		last := st.Timeline[n-1]
		p.line("  latest:  %s %s: %s", last.Time.UTC().Format(time.RFC3339), last.Type, last.Message)
	}
	if w := st.ConfirmedOff; w != nil {
		p.line("  confirmed off by %s: %s", w.By, w.Reason)
	}
}
