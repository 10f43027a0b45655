package incidents

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestPendingEventsFoldAndHold: an Event folds into the one it follows when its reason
// absorbs that one's, a storm's fence start stays held while the incident is Fencing,
// and a dropped incident's Events are gone.
func TestPendingEventsFoldAndHold(t *testing.T) {
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-1-a"}}
	var p PendingEvents
	p.Hold(Event{Incident: nf, Reason: v1alpha1.ReasonDetected, Message: "detected"})
	p.Hold(Event{Incident: nf, Reason: v1alpha1.ReasonFenceStarted, Message: "started", HoldWhileFencing: true})
	if n := p.Held(nf.Name); n != 1 {
		t.Fatalf("%d Events held after Detected and FenceStarted, want 1 (folded)", n)
	}
	nf.Status.Phase = v1alpha1.PhaseFencing
	if got := p.Take(nf); len(got) != 0 || p.Held(nf.Name) != 1 {
		t.Fatalf("took %+v while Fencing, want the storm's fence start kept back", got)
	}
	p.Hold(Event{Incident: nf, Reason: v1alpha1.ReasonFenced, Message: "fenced"})
	nf.Status.Phase = v1alpha1.PhaseFenced
	got := p.Take(nf)
	if len(got) != 1 || got[0].Reason != v1alpha1.ReasonFenced || got[0].Message != "detected. started. fenced" {
		t.Fatalf("took %+v once Fenced, want one Fenced Event saying all three", got)
	}
	p.Hold(Event{Incident: nf, Reason: v1alpha1.ReasonRemediated, Message: "released"})
	p.Drop(nf.Name)
	if n := p.Held(nf.Name); n != 0 {
		t.Fatalf("%d Events held after Drop, want 0", n)
	}
}
