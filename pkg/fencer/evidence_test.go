package fencer

import (
	"strings"
	"testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestFenceEvidenceKept: an attempt keeps the target it was issued to and what its
// Fence calls answered, whatever later read backs say; a re-issue of the same attempt
// (its outcome lost) adds its answer and keeps the first target; FenceEvidenceOf joins
// every attempt of the agent, for the Unfence that restores what they removed.
func TestFenceEvidenceKept(t *testing.T) {
	plan := twoLevels(v1alpha1.ModeAll)
	plan.Levels[0].Agents = []string{"iscsi"}
	st := &v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing}
	ev := func(kind EventKind, try int32, evidence, state string) Event {
		return Event{Kind: kind, Level: 1, Agent: "iscsi", Try: try, Evidence: evidence, State: state}
	}
	issued := ev(FenceIssued, 1, "", "")
	issued.Target = "iqn.x:node-1"
	mustApply(t, st, plan, issued, t0)
	mustApply(t, st, plan, ev(FenceReturned, 1, "removed: target=iqn.x:t1 iqn=iqn.x:node-1", "off"), t0)
	mustApply(t, st, plan, ev(StateRead, 1, "iqn.x:node-1 has no session", "on"), t0)
	// The outcome of a second call of the same try was lost and it is sent again.
	st.Attempts[0].State = v1alpha1.AttemptFencing
	again := ev(FenceIssued, 1, "", "")
	again.Target = "iqn.x:edited"
	mustApply(t, st, plan, again, t0)
	mustApply(t, st, plan, ev(FenceReturned, 1, "removed: none", "off"), t0)
	mustApply(t, st, plan, ev(StateRead, 1, "iqn.x:node-1 has no session and no ACL", "off"), t0)
	a := st.Attempts[0]
	if a.Target != "iqn.x:node-1" {
		t.Errorf("target %q, want the first call's", a.Target)
	}
	if want := "removed: target=iqn.x:t1 iqn=iqn.x:node-1\nremoved: none"; a.FenceEvidence != want {
		t.Errorf("fence evidence %q, want %q", a.FenceEvidence, want)
	}
	if a.Evidence != "iqn.x:node-1 has no session and no ACL" {
		t.Errorf("evidence %q, want the last read back", a.Evidence)
	}
	st.Attempts = append(st.Attempts, v1alpha1.Attempt{Level: 2, Agent: "iscsi", Try: 1, FenceEvidence: "removed: target=iqn.x:t2 iqn=iqn.x:node-1"})
	if got := FenceEvidenceOf(st, "iscsi"); strings.Count(got, "removed:") != 3 || !strings.HasSuffix(got, "t2 iqn=iqn.x:node-1") {
		t.Errorf("FenceEvidenceOf %q, want both attempts' answers in order", got)
	}
	if got := FenceEvidenceOf(st, "ipmi"); got != "" {
		t.Errorf("FenceEvidenceOf another agent %q, want none", got)
	}
	// An answer that would not fit whole is not kept.
	keepFenceEvidence(&a, strings.Repeat("x", v1alpha1.MaxFenceEvidence))
	if strings.Contains(a.FenceEvidence, "xxx") {
		t.Error("an answer past v1alpha1.MaxFenceEvidence was kept")
	}
}
