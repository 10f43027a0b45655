package fencer

import (
	"fmt"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/policy"
)

// Mismatched says why the incident is held for a fence device that is not its node's:
// an attempt failed TargetMismatch (the device's own identity, read before anything was
// sent, is another machine's); "" when none did. Such an incident fences nothing more:
// no retry, no next level, no release. The attempt records the target it pinned, so a
// fixed mapping takes effect only with a new incident: the person who fixes it deletes
// this one.
func Mismatched(st *v1alpha1.NodeFenceStatus) string {
	for _, a := range st.Attempts {
		if a.ErrorKind == string(plugin.KindTargetMismatch) {
			return fmt.Sprintf("level %d agent %s target %s: %s; fix the node's mapping (agents[].target), then delete this NodeFence",
				a.Level, a.Agent, a.Target, a.Error)
		}
	}
	return ""
}

// mismatchHold is the Lifecycle's answer for an incident Mismatched holds: Held with
// reason TargetMismatch, recorded once. It is looked at again rarely: only a person's
// word (confirm-off) or delete ends it.
func mismatchHold(st *v1alpha1.NodeFenceStatus) (Action, bool) {
	why := Mismatched(st)
	if why == "" {
		return Action{}, false
	}
	d := policy.Decision{Verdict: policy.Hold, Reason: v1alpha1.ReasonTargetMismatch, Message: why}
	return Action{Kind: ActNotYet, Phase: v1alpha1.PhaseHeld, Decision: d, After: mismatchRecheck,
		Record: st.Phase != v1alpha1.PhaseHeld || st.Message != why || st.Leader == ""}, true
}

// mismatchRecheck is how often an incident held for a mismatched target is looked at.
const mismatchRecheck = time.Minute
