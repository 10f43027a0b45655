package incidents

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// AddStep appends a step to an incident's timeline.
func AddStep(st *v1alpha1.NodeFenceStatus, at time.Time, typ, msg string) {
	st.Timeline = append(st.Timeline, v1alpha1.Step{Time: metav1.NewMicroTime(at), Type: typ, Message: msg})
}

// timelineBudget bounds the text of a timeline, well inside the API server's limit on
// an object's size.
const timelineBudget = 256 << 10

// TrimTimeline keeps a timeline within the CRD's count and the text budget: a status the
// API server refuses would stop the incident where it stands. What goes is the oldest
// step that is neither the first nor the last of its type, so every fact read back from
// the timeline (when the incident was detected, when its first fence started, the latest
// of each kind of step) stays.
func TrimTimeline(st *v1alpha1.NodeFenceStatus) {
	text := timelineText(st.Timeline)
	for len(st.Timeline) > v1alpha1.MaxTimelineSteps || text > timelineBudget {
		i := oldestDroppable(st.Timeline)
		if i < 0 {
			return
		}
		text -= len(st.Timeline[i].Type) + len(st.Timeline[i].Message)
		st.Timeline = slices.Delete(st.Timeline, i, i+1)
	}
}

func timelineText(tl []v1alpha1.Step) int {
	n := 0
	for _, s := range tl {
		n += len(s.Type) + len(s.Message)
	}
	return n
}

// oldestDroppable is the index of the oldest step that is neither the first nor the last
// of its kind, or -1.
func oldestDroppable(tl []v1alpha1.Step) int {
	first, last := map[string]int{}, map[string]int{}
	for i, s := range tl {
		k := kindOf(s)
		if _, ok := first[k]; !ok {
			first[k] = i
		}
		last[k] = i
	}
	for i, s := range tl {
		if k := kindOf(s); first[k] != i && last[k] != i {
			return i
		}
	}
	return -1
}

// kindOf is a step's type, and for a refused word also the word's kind (its message
// starts "confirm-off by ..." or "cancel by ..."): the latest refusal of each word is the
// answer to the word set now, and dropping it would have the word decided again.
func kindOf(s v1alpha1.Step) string {
	if s.Type != v1alpha1.StepWordRefused {
		return s.Type
	}
	word, _, _ := strings.Cut(s.Message, " ")
	return s.Type + " " + word
}

// maxText is how much free text (a message, evidence, an error) the controller writes in
// one field: a quarter of the CRD's limit, so that a whole status stays far inside the
// API server's limit on an object's size.
const maxText = 8192

// ClampStatus cuts what the controller writes to the CRD's limits: a status the API
// server refuses would stop the incident where it stands, for the sake of a long message
// or an agent's odd error kind.
func ClampStatus(st *v1alpha1.NodeFenceStatus) {
	st.Message = clampText(st.Message, maxText)
	for i := range st.Timeline {
		st.Timeline[i].Message = clampText(st.Timeline[i].Message, maxText)
	}
	TrimTimeline(st)
	for i := range st.Attempts {
		a := &st.Attempts[i]
		a.Evidence, a.Error = clampText(a.Evidence, maxText), clampText(a.Error, maxText)
		a.ErrorKind, a.PowerState = clampText(a.ErrorKind, 64), clampText(a.PowerState, 32)
		a.Target, a.FenceEvidence = clampText(a.Target, 1024), clampText(a.FenceEvidence, v1alpha1.MaxFenceEvidence)
	}
}

// clampText cuts s to at most limit bytes of valid UTF-8, saying so when it cuts.
func clampText(s string, limit int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= limit {
		return s
	}
	cut := "... (cut)"
	if limit <= len(cut) {
		cut = ""
	}
	end := limit - len(cut)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + cut
}

// LastStepIs reports whether the timeline's latest step is of type typ and its message
// contains contains: a step a retry would write again is written once.
func LastStepIs(st *v1alpha1.NodeFenceStatus, typ, contains string) bool {
	tl := st.Timeline
	return len(tl) > 0 && tl[len(tl)-1].Type == typ && strings.Contains(tl[len(tl)-1].Message, contains)
}

// UnfenceFailure words agent's failed undo (what: Unfence, power on) for the timeline,
// with the state and evidence read back after it. repeat says agent's latest failure
// since its last successful Unfence read back the same state: a retry loop records a
// change, not every try.
func UnfenceFailure(st *v1alpha1.NodeFenceStatus, agent, what, state, evidence string, err error) (msg string, repeat bool) {
	key := fmt.Sprintf("agent %s %s failed, read back %s", agent, what, state)
	return fmt.Sprintf("%s (%s): %v", key, evidence, err), strings.HasPrefix(LastUnfenceFailure(st, agent), key)
}

// LastUnfenceFailure is the message of agent's latest UnfenceFailed step since its last
// successful Unfence, or "".
func LastUnfenceFailure(st *v1alpha1.NodeFenceStatus, agent string) string {
	if s := latestAgentStep(st, agent, v1alpha1.StepUnfenceFailed, v1alpha1.StepUnfenced); s != nil && s.Type == v1alpha1.StepUnfenceFailed {
		return s.Message
	}
	return ""
}

// latestAgentStep is agent's latest step of one of types (its message names the agent
// first), nil when there is none.
func latestAgentStep(st *v1alpha1.NodeFenceStatus, agent string, types ...string) *v1alpha1.Step {
	prefix := "agent " + agent + " "
	for i := len(st.Timeline) - 1; i >= 0; i-- {
		if s := &st.Timeline[i]; strings.HasPrefix(s.Message, prefix) && slices.Contains(types, s.Type) {
			return s
		}
	}
	return nil
}

// UndoOnRecord reports whether the agent's latest undo step already puts msg's call on
// record: the same call announced, or a retry of one that failed (the failure and the
// backoff say it is sent again).
func UndoOnRecord(st *v1alpha1.NodeFenceStatus, agent, msg string) bool {
	s := latestAgentStep(st, agent, v1alpha1.StepUnfenceCalled, v1alpha1.StepUnfenceFailed, v1alpha1.StepUnfenced, v1alpha1.StepPoweredOn)
	switch {
	case s == nil:
		return false
	case s.Type == v1alpha1.StepUnfenceCalled:
		return s.Message == msg
	default:
		return s.Type == v1alpha1.StepUnfenceFailed
	}
}
