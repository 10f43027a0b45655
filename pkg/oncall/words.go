package oncall

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/oncall/life"
)

// Kind names a person's word to an incident.
type Kind string

// The words, named after their annotations.
const (
	ConfirmOff Kind = "confirm-off"
	Cancel     Kind = "cancel"
)

// Word is what a person set on an incident: the annotation, its value (the reason) and
// its -by companion (the person, held to the user's name by the chart's admission
// policy).
type Word struct {
	Kind   Kind
	By     string
	Reason string
}

// String is how the timeline names the word; Answered finds it by this prefix.
func (w Word) String() string { return fmt.Sprintf("%s by %s (%q)", w.Kind, w.By, w.Reason) }

// WordsOf returns the words set on nf, confirm-off first: a person who both confirms a
// node off and cancels its incident wants its workloads released.
func WordsOf(nf *v1alpha1.NodeFence) []Word {
	a := nf.Annotations
	var out []Word
	if r, ok := a[v1alpha1.ConfirmOffAnnotation]; ok {
		out = append(out, Word{Kind: ConfirmOff, By: a[v1alpha1.ConfirmOffByAnnotation], Reason: r})
	}
	if r, ok := a[v1alpha1.CancelAnnotation]; ok {
		out = append(out, Word{Kind: Cancel, By: a[v1alpha1.CancelByAnnotation], Reason: r})
	}
	return out
}

// answerSteps are the timeline steps that answer a word.
var answerSteps = []string{v1alpha1.StepConfirmedOff, v1alpha1.StepCancelledByPerson, v1alpha1.StepDecommissioned, v1alpha1.StepWordRefused}

// Answered reports whether nf's timeline holds an answer to w, accepted or refused: a
// word is answered once. A refused word stays refused; the person sets it again with
// another reason once what refused it changed.
func Answered(nf *v1alpha1.NodeFence, w Word) bool {
	prefix := w.String()
	return slices.ContainsFunc(nf.Status.Timeline, func(s v1alpha1.Step) bool {
		return slices.Contains(answerSteps, s.Type) && strings.HasPrefix(s.Message, prefix)
	})
}

// Pending returns the first word on nf not answered yet.
func Pending(nf *v1alpha1.NodeFence) (Word, bool) {
	for _, w := range WordsOf(nf) {
		if !Answered(nf, w) {
			return w, true
		}
	}
	return Word{}, false
}

// Act is what the incident loop does with a word.
type Act string

const (
	// ActNone: nothing, now or later (the word is moot: the fence is verified already).
	ActNone Act = "None"
	// ActRead: make the reads the answer waits on and ask again with them (Facts.Read):
	// whether the word's author may give it (AskPermission), and for a confirm-off every
	// sign of the node's life (Facts.Life).
	ActRead Act = "Read"
	// ActRefuse: record Answer.Message as the refusal; nothing else changes.
	ActRefuse Act = "Refuse"
	// ActAccept: move to Answer.Phase with Answer.Condition, recording Answer.Message.
	ActAccept Act = "Accept"
)

// Facts are what the loop knows when it answers.
type Facts struct {
	// NodeGone: the Node object is deleted.
	NodeGone bool
	// Read: the reads ActRead asks for are made; Denied and Life hold their answers.
	Read bool
	// Denied is why the word's author may not give it (AskPermission), "" when they may.
	Denied string
	// Life is every sign that the node may be alive, gathered for a confirm-off.
	Life life.Signs
}

// Answer is the loop's answer to a word.
type Answer struct {
	Act     Act
	Phase   v1alpha1.Phase
	Step    string
	Message string
	// Condition is set on the incident with the move (Accept).
	Condition metav1.Condition
}

// Decide answers w on nf. It does no I/O: a word it would act on asks for the reads
// first (ActRead). The incident loop answers with it, and explain says with it what a
// confirm-off would do now.
func Decide(nf *v1alpha1.NodeFence, w Word, f Facts) Answer {
	if w.Kind == ConfirmOff {
		return confirmOff(nf, w, f)
	}
	return cancel(nf, w, f)
}

func refuse(w Word, format string, args ...any) Answer {
	return Answer{Act: ActRefuse, Step: v1alpha1.StepWordRefused, Message: w.String() + " refused: " + fmt.Sprintf(format, args...)}
}

// confirmOff releases the node as if a level were verified, once its author is known to
// be allowed to give it and no sign says the node may be alive (life.Signs): its Lease,
// read live, silent since the incident opened, no replica renewing on it, no fresh
// report of its agent or answer of its kubelet, no contradicted watchdog fence. Else
// the word is refused and nothing is released (safety invariants 1, 10 and 13).
func confirmOff(nf *v1alpha1.NodeFence, w Word, f Facts) Answer {
	switch phase := nf.Status.Phase; {
	case nf.Status.Verified(), !confirmable(phase):
		return Answer{Act: ActNone}
	case f.NodeGone:
		return refuse(w, "the Node object of %s is gone; cancel the incident to close it as decommissioned", nf.Spec.NodeName)
	case !f.Read:
		return Answer{Act: ActRead}
	case f.Denied != "":
		return refuse(w, "%s", f.Denied)
	}
	if alive := f.Life.Alive(nf); alive != "" {
		return refuse(w, "node %s is alive: %s; nothing is released. Set it again with a new reason once the node is silent",
			nf.Spec.NodeName, alive)
	}
	msg := fmt.Sprintf("%s: node %s taken as off on a person's word (its Lease, read live, shows no renewal since the incident opened; no replica, node agent or kubelet probe shows it alive); its workloads are released",
		w, nf.Spec.NodeName)
	return Answer{Act: ActAccept, Phase: v1alpha1.PhaseFenced, Step: v1alpha1.StepConfirmedOff, Message: msg,
		Condition: metav1.Condition{Type: v1alpha1.ConditionFenced, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ConditionReasonConfirmedOff, Message: msg}}
}

// confirmable are the phases a confirm-off moves on: not yet verified, and either open
// or failed (a BMC that died with its node fails every level).
func confirmable(p v1alpha1.Phase) bool {
	return p == v1alpha1.PhasePending || p == v1alpha1.PhaseHeld || p == v1alpha1.PhaseFencing || p == v1alpha1.PhaseFailed
}

// cancel ends an incident that sent no fence, or closes the incident of a node that is
// gone, once its author is known to be allowed to give it. A fence already sent is never
// undone by a cancel: the word is refused, with what to do instead.
func cancel(nf *v1alpha1.NodeFence, w Word, f Facts) Answer {
	if phase := nf.Status.Phase; !phase.Open() && phase != v1alpha1.PhaseFailed {
		return Answer{Act: ActNone}
	}
	if !f.Read {
		// Whether the node is gone, read live, decides the answer.
		return Answer{Act: ActRead}
	}
	a := cancelAnswer(nf, w, f)
	if a.Act == ActAccept && f.Denied != "" {
		return refuse(w, "%s", f.Denied)
	}
	return a
}

// cancelAnswer is cancel's answer, after the reads, to an author who may give it.
func cancelAnswer(nf *v1alpha1.NodeFence, w Word, f Facts) Answer {
	phase := nf.Status.Phase
	switch {
	case f.NodeGone:
		msg := fmt.Sprintf("%s: the Node object of %s is gone; incident closed as decommissioned. Nothing it did is undone: %d fence call(s), taints %v",
			w, nf.Spec.NodeName, len(nf.Status.Attempts), nf.Status.Remediation.TaintsAdded)
		return Answer{Act: ActAccept, Phase: v1alpha1.PhaseRecovered, Step: v1alpha1.StepDecommissioned, Message: msg,
			Condition: metav1.Condition{Type: v1alpha1.ConditionRecovered, Status: metav1.ConditionTrue,
				Reason: v1alpha1.ConditionReasonDecommissioned, Message: msg}}
	case phase == "":
		// Not decided yet: the loop writes its first status, then the word is answered.
		return Answer{Act: ActNone}
	case phase == v1alpha1.PhasePending || phase == v1alpha1.PhaseHeld || (phase == v1alpha1.PhaseFencing && len(nf.Status.Attempts) == 0):
		// Fencing with no attempt: its first call was held (a pause) and none was sent;
		// every call is on record before it is sent (write-ahead).
		msg := fmt.Sprintf("%s: incident ended before any fence; node %s gets no new automatic incident until it shows a sign of life or a new boot, or a person sets %s=true on this one",
			w, nf.Spec.NodeName, v1alpha1.RetryAnnotation)
		if phase == v1alpha1.PhaseFencing {
			msg += "; its node agent, if it read the incident, has stopped feeding its watchdog and the node may still reset"
		}
		return Answer{Act: ActAccept, Phase: v1alpha1.PhaseCancelled, Step: v1alpha1.StepCancelledByPerson, Message: msg,
			Condition: metav1.Condition{Type: v1alpha1.ConditionHeld, Status: metav1.ConditionFalse,
				Reason: v1alpha1.ConditionReasonCancelled, Message: msg}}
	}
	return refuse(w, "incident in phase %s sent a fence (%d call(s)); a cancel never undoes one. Release the node with %s once it is off, or wait for its new boot; for a node gone for good, delete its Node object and cancel again",
		phase, len(nf.Status.Attempts), v1alpha1.ConfirmOffAnnotation)
}

// Accept applies an accepted answer's record to nf's status (the phase move itself is
// the loop's): the person's word for a confirm-off, and the answer's condition.
func Accept(nf *v1alpha1.NodeFence, w Word, a Answer, now time.Time) {
	if a.Phase == v1alpha1.PhaseFenced {
		nf.Status.ConfirmedOff = &v1alpha1.PersonWord{By: w.By, Reason: w.Reason, Time: metav1.NewMicroTime(now)}
	}
	cond := a.Condition
	cond.ObservedGeneration = nf.Generation
	meta.SetStatusCondition(&nf.Status.Conditions, cond)
}

// CancelledByPerson reports whether nf ended on a person's cancel (not on a sign of
// life): its node gets no new automatic incident until it shows one.
func CancelledByPerson(nf *v1alpha1.NodeFence) bool {
	return nf.Status.Phase == v1alpha1.PhaseCancelled && slices.ContainsFunc(nf.Status.Timeline,
		func(s v1alpha1.Step) bool { return s.Type == v1alpha1.StepCancelledByPerson })
}

// NoNewIncident returns why no automatic incident may open for the node of incidents
// incs, whose Node shows boot bootID: its newest incident failed (or a person cancelled
// it), and since then the node showed no sign of life (lived), no new boot, and no person
// set RetryAnnotation on it. "" when one may.
func NoNewIncident(incs []*v1alpha1.NodeFence, bootID string, lived func(*v1alpha1.NodeFence) bool) string {
	last := newest(incs)
	if last == nil {
		return ""
	}
	byPerson := CancelledByPerson(last)
	switch {
	case last.Status.Phase != v1alpha1.PhaseFailed && !byPerson,
		last.Annotations[v1alpha1.RetryAnnotation] == "true",
		bootID != "" && last.Status.BootID != "" && bootID != last.Status.BootID,
		lived(last):
		return ""
	}
	how := "failed"
	if byPerson {
		how = "was cancelled by a person"
	}
	return fmt.Sprintf("incident %s %s (%s); %s", last.Name, how, last.Status.Message, untilNew(last))
}

// untilNew says what lets a new automatic incident open after last.
func untilNew(last *v1alpha1.NodeFence) string {
	return fmt.Sprintf("no new automatic incident until node %s shows a sign of life or a new boot, or a person sets %s=true on %s",
		last.Spec.NodeName, v1alpha1.RetryAnnotation, last.Name)
}

// newest is the newest of incs, nil for none.
func newest(incs []*v1alpha1.NodeFence) *v1alpha1.NodeFence {
	var out *v1alpha1.NodeFence
	for _, nf := range incs {
		if out == nil || out.CreationTimestamp.Before(&nf.CreationTimestamp) {
			out = nf
		}
	}
	return out
}

// Waiting returns the newest of a node's incidents when a word on it is waiting for an
// answer the loop would not otherwise give: a Failed incident (the loop drives only open
// ones) or, with the Node object gone, any incident the word may still close.
func Waiting(incs []*v1alpha1.NodeFence, nodeGone bool) *v1alpha1.NodeFence {
	last := newest(incs)
	if last == nil || (!nodeGone && last.Status.Phase != v1alpha1.PhaseFailed) {
		return nil
	}
	if !last.Status.Phase.Open() && last.Status.Phase != v1alpha1.PhaseFailed {
		return nil
	}
	if _, ok := Pending(last); !ok {
		return nil
	}
	return last
}
