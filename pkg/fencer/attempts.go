package fencer

import (
	"strings"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// AttemptOf is the attempt of agent at level with try, nil if there is none.
func AttemptOf(st *v1alpha1.NodeFenceStatus, level int32, agent string, try int32) *v1alpha1.Attempt {
	for i := len(st.Attempts) - 1; i >= 0; i-- {
		if a := &st.Attempts[i]; a.Level == level && a.Agent == agent && a.Try == try {
			return a
		}
	}
	return nil
}

// FenceEvidenceOf is what every Fence call of agent in the incident answered, oldest
// first, one answer per line: what an Unfence of that agent restores. Earlier tries of a
// level that later verified, and earlier levels, may have removed access too.
func FenceEvidenceOf(st *v1alpha1.NodeFenceStatus, agent string) string {
	var lines []string
	for _, a := range st.Attempts {
		if a.Agent == agent && a.FenceEvidence != "" {
			lines = append(lines, a.FenceEvidence)
		}
	}
	return strings.Join(lines, "\n")
}

// RestoreOf is what an Unfence of at's agent restores: what every Fence call of that
// agent in the incident answered (an iSCSI agent's "removed:" lines), never a later read
// back. An incident recorded before FenceEvidence existed has only at's Evidence.
func RestoreOf(st *v1alpha1.NodeFenceStatus, at v1alpha1.Attempt) string {
	if ev := FenceEvidenceOf(st, at.Agent); ev != "" {
		return ev
	}
	return at.Evidence
}

// VerifiedBefore picks the attempts an earlier leader must have verified: those of the
// last level issued still Fencing or Verifying, or else each agent's first try there.
func VerifiedBefore(st *v1alpha1.NodeFenceStatus) []int {
	level := LastLevelIssued(st)
	var open, first []int
	seen := map[string]bool{}
	for i, a := range st.Attempts {
		if a.Level != level {
			continue
		}
		if a.State == v1alpha1.AttemptFencing || a.State == v1alpha1.AttemptVerifying {
			open = append(open, i)
		}
		if !seen[a.Agent] {
			seen[a.Agent] = true
			first = append(first, i)
		}
	}
	if len(open) > 0 {
		return open
	}
	return first
}

// LastAttempt is the incident's latest attempt, nil before the first.
func LastAttempt(st *v1alpha1.NodeFenceStatus) *v1alpha1.Attempt {
	if len(st.Attempts) == 0 {
		return nil
	}
	return &st.Attempts[len(st.Attempts)-1]
}

// LastLevelIssued is the highest level an attempt of the incident was issued at.
func LastLevelIssued(st *v1alpha1.NodeFenceStatus) int32 {
	var level int32
	for _, a := range st.Attempts {
		level = max(level, a.Level)
	}
	return level
}
