package incidents

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestTimelineKeepsFirstAndLatest: a timeline never outgrows the CRD's limit, and what
// goes is never the first or the last step of its type: the detection, the first fence's
// start (the cooldown counts from it) and the latest of each kind stay.
func TestTimelineKeepsFirstAndLatest(t *testing.T) {
	var st v1alpha1.NodeFenceStatus
	t0 := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	for _, typ := range []string{v1alpha1.StepEvidenceStarted, v1alpha1.StepDetected, v1alpha1.StepFenceStarted, v1alpha1.StepVerified, v1alpha1.StepRemediated} {
		AddStep(&st, t0, typ, typ)
	}
	for i := range v1alpha1.MaxTimelineSteps + 5 {
		AddStep(&st, t0.Add(time.Duration(i+1)*time.Second), v1alpha1.StepUnfenceFailed, fmt.Sprint(i))
	}
	ClampStatus(&st) // as every status write does
	if len(st.Timeline) != v1alpha1.MaxTimelineSteps {
		t.Fatalf("%d steps, want %d", len(st.Timeline), v1alpha1.MaxTimelineSteps)
	}
	for i, typ := range []string{v1alpha1.StepEvidenceStarted, v1alpha1.StepDetected, v1alpha1.StepFenceStarted, v1alpha1.StepVerified, v1alpha1.StepRemediated} {
		if st.Timeline[i].Type != typ {
			t.Errorf("step %d is %s, want %s: the first of each type stays", i, st.Timeline[i].Type, typ)
		}
	}
	if first, last := st.Timeline[5].Message, st.Timeline[len(st.Timeline)-1].Message; first != "0" || last != fmt.Sprint(v1alpha1.MaxTimelineSteps+4) {
		t.Errorf("UnfenceFailed steps from %q to %q: want the first and the latest kept", first, last)
	}
	if next := st.Timeline[6].Message; next != "11" {
		t.Errorf("the step after the first UnfenceFailed is %q, want 11: the oldest in between go first", next)
	}
	// Text counts too: a few huge messages are trimmed to the budget the same way.
	var big v1alpha1.NodeFenceStatus
	AddStep(&big, t0, v1alpha1.StepDetected, "opened")
	for range 100 {
		AddStep(&big, t0, v1alpha1.StepUnfenceFailed, strings.Repeat("x", 8000))
	}
	ClampStatus(&big)
	if n := timelineText(big.Timeline); n > timelineBudget || big.Timeline[0].Type != v1alpha1.StepDetected {
		t.Errorf("timeline text %d bytes (budget %d), first step %s", n, timelineBudget, big.Timeline[0].Type)
	}
}

// TestTimelineKeepsTheAnswerToEachWord: a refused confirm-off followed by many refused
// cancels keeps its refusal through any trim: it answers the confirm-off set now, which
// would otherwise be decided again, and accepted once what refused it had changed,
// without the person saying it again.
func TestTimelineKeepsTheAnswerToEachWord(t *testing.T) {
	var st v1alpha1.NodeFenceStatus
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	AddStep(&st, t0, v1alpha1.StepWordRefused, `confirm-off by alice ("first") refused: the kubelet renews its Lease`)
	AddStep(&st, t0, v1alpha1.StepWordRefused, `confirm-off by alice ("now") refused: the node agent reported 2s ago`)
	for i := range v1alpha1.MaxTimelineSteps + 5 {
		AddStep(&st, t0.Add(time.Duration(i+1)*time.Second), v1alpha1.StepWordRefused, fmt.Sprintf(`cancel by bob ("%d") refused: fencing`, i))
	}
	ClampStatus(&st)
	if len(st.Timeline) != v1alpha1.MaxTimelineSteps {
		t.Fatalf("%d steps, want %d", len(st.Timeline), v1alpha1.MaxTimelineSteps)
	}
	kept := false
	for _, s := range st.Timeline {
		kept = kept || strings.Contains(s.Message, `("now")`)
	}
	if !kept {
		t.Errorf("the refusal of the confirm-off set now was trimmed away")
	}
}

func TestClampStatus(t *testing.T) {
	long := strings.Repeat("é", maxText) // two bytes each: a cut can fall inside one
	early := "ab\xff" + strings.Repeat("c", 2*maxText)
	st := v1alpha1.NodeFenceStatus{Message: long, Timeline: []v1alpha1.Step{{Message: early}},
		Attempts: []v1alpha1.Attempt{{Evidence: long, Error: "short", ErrorKind: strings.Repeat("K", 100)}}}
	ClampStatus(&st)
	for name, s := range map[string]string{"message": st.Message, "step": st.Timeline[0].Message, "evidence": st.Attempts[0].Evidence} {
		if len(s) > maxText || len(s) < maxText-16 || !utf8.ValidString(s) || !strings.HasSuffix(s, "... (cut)") {
			t.Errorf("%s: %d bytes, valid UTF-8 %v, ends %q", name, len(s), utf8.ValidString(s), s[max(0, len(s)-20):])
		}
	}
	if st.Attempts[0].Error != "short" || len(st.Attempts[0].ErrorKind) > 64 {
		t.Errorf("error %q, error kind of %d bytes", st.Attempts[0].Error, len(st.Attempts[0].ErrorKind))
	}
}

// TestLastSteps: the latest step of a type, and an agent's latest Unfence failure since
// its last success, as retries read them back before writing again.
func TestLastSteps(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	st := &v1alpha1.NodeFenceStatus{}
	AddStep(st, t0, v1alpha1.StepUnfenceFailed, "agent ipmi unfence failed, read back on")
	AddStep(st, t0, v1alpha1.StepUnfenceFailed, "agent iscsi unfence failed, read back fenced")
	if got := LastUnfenceFailure(st, "ipmi"); got != "agent ipmi unfence failed, read back on" {
		t.Errorf("LastUnfenceFailure(ipmi) = %q", got)
	}
	if !LastStepIs(st, v1alpha1.StepUnfenceFailed, "iscsi") || LastStepIs(st, v1alpha1.StepUnfenceFailed, "ipmi") ||
		LastStepIs(st, v1alpha1.StepUnfenced, "iscsi") {
		t.Error("LastStepIs does not read the latest step alone")
	}
	AddStep(st, t0, v1alpha1.StepUnfenced, "agent ipmi unfenced")
	if got := LastUnfenceFailure(st, "ipmi"); got != "" {
		t.Errorf("LastUnfenceFailure(ipmi) after its Unfence = %q, want none", got)
	}
	if got := LastUnfenceFailure(st, "iscsi"); got == "" {
		t.Error("LastUnfenceFailure(iscsi) lost to another agent's Unfence")
	}
	if LastStepIs(&v1alpha1.NodeFenceStatus{}, v1alpha1.StepUnfenced, "") {
		t.Error("LastStepIs on an empty timeline")
	}
}

// TestUnfenceFailure: a failed undo is worded with what was read back after it, and a
// retry that reads back the same state as the agent's latest failure since its last
// success is a repeat, not a new step.
func TestUnfenceFailure(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		steps      [][2]string // type, message
		state      string
		wantRepeat bool
	}{
		"first failure":          {state: "on"},
		"same state again":       {steps: [][2]string{{v1alpha1.StepUnfenceFailed, "agent ipmi Unfence failed, read back on (x): boom"}}, state: "on", wantRepeat: true},
		"another state":          {steps: [][2]string{{v1alpha1.StepUnfenceFailed, "agent ipmi Unfence failed, read back on (x): boom"}}, state: "off"},
		"after a success":        {steps: [][2]string{{v1alpha1.StepUnfenceFailed, "agent ipmi Unfence failed, read back on (x): boom"}, {v1alpha1.StepUnfenced, "agent ipmi reports on"}}, state: "on"},
		"another agent's failed": {steps: [][2]string{{v1alpha1.StepUnfenceFailed, "agent iscsi Unfence failed, read back on (x): boom"}}, state: "on"},
	} {
		t.Run(name, func(t *testing.T) {
			st := &v1alpha1.NodeFenceStatus{}
			for _, s := range tc.steps {
				AddStep(st, t0, s[0], s[1])
			}
			msg, repeat := UnfenceFailure(st, "ipmi", "Unfence", tc.state, "read it", errors.New("refused"))
			if want := "agent ipmi Unfence failed, read back " + tc.state + " (read it): refused"; msg != want || repeat != tc.wantRepeat {
				t.Errorf("UnfenceFailure = %q, %v; want %q, %v", msg, repeat, want, tc.wantRepeat)
			}
		})
	}
}
