package oncall

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/oncall/life"
)

func incident(phase v1alpha1.Phase, annotations map[string]string) *v1alpha1.NodeFence {
	return &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-2-x", Generation: 1, Annotations: annotations},
		Spec: v1alpha1.NodeFenceSpec{NodeName: "node-2"}, Status: v1alpha1.NodeFenceStatus{Phase: phase}}
}

var (
	confirmWord = map[string]string{v1alpha1.ConfirmOffAnnotation: "chassis lost power", v1alpha1.ConfirmOffByAnnotation: "alice"}
	cancelWord  = map[string]string{v1alpha1.CancelAnnotation: "decommissioned", v1alpha1.CancelByAnnotation: "bob"}
)

// TestDecide covers every answer to a person's word: a confirm-off releases only a
// node that no sign shows alive, and only once the reads are made; a cancel ends only an
// incident that sent no fence, or closes that of a node that is gone; neither is taken
// from an author who may not give it.
func TestDecide(t *testing.T) {
	read := func(f Facts) Facts { f.Read = true; return f }
	for name, tc := range map[string]struct {
		phase       v1alpha1.Phase
		annotations map[string]string
		facts       Facts
		act         Act
		to          v1alpha1.Phase
		reason      string
		says        string
	}{
		"confirm-off asks for the reads first":     {v1alpha1.PhaseFencing, confirmWord, Facts{}, ActRead, "", "", ""},
		"confirm-off on a silent node, fencing":    {v1alpha1.PhaseFencing, confirmWord, read(Facts{}), ActAccept, v1alpha1.PhaseFenced, v1alpha1.ConditionReasonConfirmedOff, "taken as off"},
		"confirm-off on a silent node, failed":     {v1alpha1.PhaseFailed, confirmWord, read(Facts{}), ActAccept, v1alpha1.PhaseFenced, v1alpha1.ConditionReasonConfirmedOff, "alice"},
		"confirm-off on a silent node, held":       {v1alpha1.PhaseHeld, confirmWord, read(Facts{}), ActAccept, v1alpha1.PhaseFenced, v1alpha1.ConditionReasonConfirmedOff, "chassis lost power"},
		"confirm-off on a node that renews":        {v1alpha1.PhaseFailed, confirmWord, read(Facts{Life: life.Signs{Kubelet: "its Lease was renewed"}}), ActRefuse, "", "", "is alive: its Lease was renewed"},
		"confirm-off on a node a replica runs on":  {v1alpha1.PhaseFailed, confirmWord, read(Facts{Life: life.Signs{Replica: "replica r1 was last seen renewing"}}), ActRefuse, "", "", "is alive: a controller replica runs on it: replica r1"},
		"confirm-off by an author who may not":     {v1alpha1.PhaseFailed, confirmWord, read(Facts{Denied: "alice may not create nodefences/confirm"}), ActRefuse, "", "", "refused: alice may not"},
		"confirm-off on a gone node":               {v1alpha1.PhaseFencing, confirmWord, Facts{NodeGone: true}, ActRefuse, "", "", "cancel the incident"},
		"confirm-off on a released incident":       {v1alpha1.PhaseRemediated, confirmWord, read(Facts{}), ActNone, "", "", ""},
		"confirm-off on an undecided incident":     {"", confirmWord, read(Facts{}), ActNone, "", "", ""},
		"cancel asks for the reads first":          {v1alpha1.PhaseHeld, cancelWord, Facts{}, ActRead, "", "", ""},
		"cancel of a held incident":                {v1alpha1.PhaseHeld, cancelWord, read(Facts{}), ActAccept, v1alpha1.PhaseCancelled, v1alpha1.ConditionReasonCancelled, "before any fence"},
		"cancel of a pending incident":             {v1alpha1.PhasePending, cancelWord, read(Facts{}), ActAccept, v1alpha1.PhaseCancelled, v1alpha1.ConditionReasonCancelled, "bob"},
		"cancel by an author who may not":          {v1alpha1.PhaseHeld, cancelWord, read(Facts{Denied: "bob may not create nodefences/cancel"}), ActRefuse, "", "", "refused: bob may not"},
		"cancel of a fencing incident, none sent":  {v1alpha1.PhaseFencing, cancelWord, read(Facts{}), ActAccept, v1alpha1.PhaseCancelled, v1alpha1.ConditionReasonCancelled, "may still reset"},
		"cancel of a released incident is refused": {v1alpha1.PhaseRemediated, cancelWord, read(Facts{}), ActRefuse, "", "", "never undoes one"},
		"cancel of a gone node's fencing incident": {v1alpha1.PhaseFencing, cancelWord, read(Facts{NodeGone: true}), ActAccept, v1alpha1.PhaseRecovered, v1alpha1.ConditionReasonDecommissioned, "Nothing it did is undone"},
		"cancel of a gone node's failed incident":  {v1alpha1.PhaseFailed, cancelWord, read(Facts{NodeGone: true}), ActAccept, v1alpha1.PhaseRecovered, v1alpha1.ConditionReasonDecommissioned, "decommissioned"},
		"cancel of an undecided incident waits":    {"", cancelWord, read(Facts{}), ActNone, "", "", ""},
		"cancel of an ended incident":              {v1alpha1.PhaseRecovered, cancelWord, Facts{NodeGone: true}, ActNone, "", "", ""},
	} {
		t.Run(name, func(t *testing.T) {
			nf := incident(tc.phase, tc.annotations)
			w, ok := Pending(nf)
			if !ok {
				t.Fatal("no word pending")
			}
			a := Decide(nf, w, tc.facts)
			if a.Act != tc.act || a.Phase != tc.to || a.Condition.Reason != tc.reason || !strings.Contains(a.Message, tc.says) {
				t.Fatalf("answer %+v; want %s to %q, condition reason %q, saying %q", a, tc.act, tc.to, tc.reason, tc.says)
			}
			if a.Act == ActAccept && !nf.Status.Phase.Open() && a.Phase == v1alpha1.PhaseFenced && tc.phase != v1alpha1.PhaseFailed {
				t.Errorf("confirm-off accepted on ended phase %s", tc.phase)
			}
		})
	}
}

// TestDecideOnSigns: a confirm-off is refused on any sign of the node's life (life.Signs),
// with the sign in the refusal, and taken on none.
func TestDecideOnSigns(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		signs life.Signs
		says  string
	}{
		"none":                {life.Signs{At: now, Agent: life.Seen{At: now.Add(-time.Minute), For: 30 * time.Second}}, ""},
		"agent reported":      {life.Signs{At: now, Agent: life.Seen{At: now.Add(-3 * time.Second), For: 30 * time.Second}}, "is alive: its node agent reported 3s ago"},
		"kubelet answered":    {life.Signs{At: now, Probe: life.Seen{At: now.Add(-time.Second), For: 2 * time.Minute}}, "is alive: its kubelet answered a probe 1s ago"},
		"replica on the node": {life.Signs{At: now, Replica: "replica r1 was last seen renewing"}, "is alive: a controller replica runs on it"},
	} {
		t.Run(name, func(t *testing.T) {
			nf := incident(v1alpha1.PhaseFailed, confirmWord)
			w, _ := Pending(nf)
			a := Decide(nf, w, Facts{Read: true, Life: tc.signs})
			if want := map[bool]Act{true: ActAccept, false: ActRefuse}[tc.says == ""]; a.Act != want || !strings.Contains(a.Message, tc.says) {
				t.Errorf("confirm-off answered %s (%s), want %s saying %q", a.Act, a.Message, want, tc.says)
			}
		})
	}
}

// TestAcceptedWordIsRecorded: an accepted confirm-off makes the incident verified (the
// only other way to a release), names the person, and is answered once.
func TestAcceptedWordIsRecorded(t *testing.T) {
	nf := incident(v1alpha1.PhaseFailed, confirmWord)
	w, _ := Pending(nf)
	a := Decide(nf, w, Facts{Read: true})
	if nf.Status.Verified() {
		t.Fatal("verified before the word was accepted")
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	Accept(nf, w, a, now)
	nf.Status.Timeline = append(nf.Status.Timeline, v1alpha1.Step{Type: a.Step, Message: a.Message})
	if !nf.Status.Verified() || nf.Status.ConfirmedOff.By != "alice" || nf.Status.ConfirmedOff.Reason != "chassis lost power" || !nf.Status.ConfirmedOff.Time.Time.Equal(now) {
		t.Errorf("status after confirm-off: %+v", nf.Status.ConfirmedOff)
	}
	if c := nf.Status.Conditions; len(c) != 1 || c[0].Type != v1alpha1.ConditionFenced || c[0].Reason != v1alpha1.ConditionReasonConfirmedOff || c[0].ObservedGeneration != 1 {
		t.Errorf("conditions %+v", c)
	}
	if _, ok := Pending(nf); ok {
		t.Error("the word is still pending once answered")
	}
	// The same annotation with a new reason is a new word.
	nf.Annotations[v1alpha1.ConfirmOffAnnotation] = "checked again"
	if _, ok := Pending(nf); !ok {
		t.Error("a new reason is not a new word")
	}
}

// TestWaiting: only a Failed incident, or any open one of a node that is gone, waits
// for its word outside the loop's drive.
func TestWaiting(t *testing.T) {
	old := incident(v1alpha1.PhaseRemediated, nil)
	failed := incident(v1alpha1.PhaseFailed, confirmWord)
	failed.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	if got := Waiting([]*v1alpha1.NodeFence{old, failed}, false); got != failed {
		t.Errorf("failed incident with a word: got %v", got)
	}
	held := incident(v1alpha1.PhaseHeld, cancelWord)
	if got := Waiting([]*v1alpha1.NodeFence{held}, false); got != nil {
		t.Errorf("a held incident is driven by the loop, got %v", got)
	}
	if got := Waiting([]*v1alpha1.NodeFence{held}, true); got != held {
		t.Errorf("a gone node's held incident with a cancel: got %v", got)
	}
	if got := Waiting([]*v1alpha1.NodeFence{incident(v1alpha1.PhaseFailed, nil)}, false); got != nil {
		t.Errorf("failed incident without a word: got %v", got)
	}
	cancelled := incident(v1alpha1.PhaseCancelled, cancelWord)
	cancelled.Status.Timeline = []v1alpha1.Step{{Type: v1alpha1.StepCancelledByPerson}}
	if !CancelledByPerson(cancelled) || CancelledByPerson(incident(v1alpha1.PhaseCancelled, nil)) {
		t.Error("CancelledByPerson tells a person's cancel from a sign of life wrongly")
	}
}

// TestCancelOfAFencingIncidentThatSentACall: a Fencing incident with a call on record (it
// may have landed) is never cancelled.
func TestCancelOfAFencingIncidentThatSentACall(t *testing.T) {
	nf := incident(v1alpha1.PhaseFencing, cancelWord)
	nf.Status.Attempts = []v1alpha1.Attempt{{Level: 1, Agent: "ipmi", Try: 1, State: v1alpha1.AttemptVerifying}}
	w, _ := Pending(nf)
	if a := Decide(nf, w, Facts{Read: true}); a.Act != ActRefuse || !strings.Contains(a.Message, "sent a fence (1 call(s)); a cancel never undoes one") {
		t.Errorf("answer %+v, want refused: a call was sent", a)
	}
}
