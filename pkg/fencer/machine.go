package fencer

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// Level is one fencing level as the machine needs it.
type Level struct {
	Agents  []string
	Mode    v1alpha1.LevelMode
	Timeout time.Duration
	Retries int32
	Backoff time.Duration
	// ReadBack is how long, at least, the state is read back after an off whose outcome
	// is unknown (unknownOutcome), before the same agent may send another: the longest of
	// its agents' stated delays (agents[].offDelay). Zero means DefaultReadBack.
	ReadBack time.Duration
}

// Plan is the ordered list of levels for one incident.
type Plan struct {
	Levels []Level
	// PollInterval is how often a state is read back while verifying.
	PollInterval time.Duration
}

// DefaultReadBack is v1alpha1.DefaultOffDelay: longer than a BMC takes to act on a
// command it acknowledged.
const DefaultReadBack = v1alpha1.DefaultOffDelay

func (l Level) readBack() time.Duration {
	if l.ReadBack > 0 {
		return l.ReadBack
	}
	return DefaultReadBack
}

// PlanFor builds the plan of a (defaulted) policy whose levels name agents.
func PlanFor(p *v1alpha1.Policy, agents []v1alpha1.Agent, poll time.Duration) Plan {
	delay := map[string]time.Duration{}
	for _, a := range agents {
		delay[a.Name] = a.OffDelay.Duration
	}
	plan := Plan{PollInterval: poll}
	for _, l := range p.Levels {
		lv := Level{Agents: l.Agents, Mode: l.Mode, Timeout: l.Timeout.Duration, Backoff: l.Backoff.Duration}
		if l.Watchdog {
			lv.Agents = []string{v1alpha1.WatchdogAgent}
		}
		if l.Retries != nil {
			lv.Retries = *l.Retries
		}
		for _, a := range lv.Agents {
			lv.ReadBack = max(lv.ReadBack, delay[a])
		}
		plan.Levels = append(plan.Levels, lv)
	}
	return plan
}

// Kind is what the caller must do next.
type Kind string

const (
	// DoFence: call Fence on Agent: a new try, never the re-issue of one whose outcome
	// may still land (that one is read back: DoVerify).
	DoFence Kind = "Fence"
	// DoVerify: call Status on Agent and Apply the state read.
	DoVerify Kind = "Verify"
	// DoExpire: the attempt passed its deadline; Apply an Expired event.
	DoExpire Kind = "Expire"
	// DoWait: nothing to do until Until.
	DoWait Kind = "Wait"
	// Done: a level is verified; the node is fenced.
	Done Kind = "Done"
	// GiveUp: every level failed.
	GiveUp Kind = "GiveUp"
)

// Step is the machine's instruction.
type Step struct {
	Kind  Kind
	Level int32
	Agent string
	Try   int32
	Until time.Time
	// Reason explains a GiveUp or a Wait.
	Reason string
}

// Next returns what to do for the incident at now. It never changes st.
func Next(st *v1alpha1.NodeFenceStatus, plan Plan, now time.Time) Step {
	if why := Mismatched(st); why != "" {
		// Nothing more is sent, not even through a verified level's other agents: the
		// controller saves and hands the incident to the Lifecycle, which holds it.
		return Step{Kind: DoWait, Until: now, Reason: why}
	}
	if st.Verified() {
		return Step{Kind: Done, Level: st.VerifiedLevel}
	}
	level := max(st.Level, 1)
	if int(level) > len(plan.Levels) {
		return Step{Kind: GiveUp, Reason: failureSummary(st)}
	}
	lv := plan.Levels[level-1]
	var wait *Step
	for _, agent := range lv.Agents {
		a := latest(st, level, agent)
		step, settled := agentStep(a, lv, level, agent, now)
		if settled {
			continue
		}
		if step.Kind == DoWait {
			if wait == nil || step.Until.Before(wait.Until) {
				wait = &step
			}
			if lv.Mode == v1alpha1.ModeAny {
				continue
			}
			return step
		}
		return step
	}
	if wait != nil {
		return *wait
	}
	// Every agent of the level is settled; Apply moves the level on, so this is reached
	// only for a status written by an older version or by hand.
	return Step{Kind: GiveUp, Reason: fmt.Sprintf("level %d settled without a verdict", level)}
}

// agentStep says what one agent of the level needs; settled means it needs nothing.
func agentStep(a *v1alpha1.Attempt, lv Level, level int32, agent string, now time.Time) (Step, bool) {
	if a == nil {
		return Step{Kind: DoFence, Level: level, Agent: agent, Try: 1}, false
	}
	switch a.State {
	case v1alpha1.AttemptVerified:
		return Step{}, true
	case v1alpha1.AttemptFencing, v1alpha1.AttemptVerifying:
		if !now.Before(a.Deadline.Time) {
			return Step{Kind: DoExpire, Level: level, Agent: agent, Try: a.Try}, false
		}
		if a.State == v1alpha1.AttemptFencing && agent == v1alpha1.WatchdogAgent {
			// The watchdog's "call" is the controller's own check and sends nothing.
			return Step{Kind: DoFence, Level: level, Agent: agent, Try: a.Try}, false
		}
		// An attempt still Fencing here was written before its call, and the call's
		// outcome was lost (a crash, a handover, a failed save after it): the off may
		// still land, so the target is read back first and the call never sent again
		// (lostInFlight).
		return Step{Kind: DoVerify, Level: level, Agent: agent, Try: a.Try}, false
	}
	// Failed.
	if givenUp(a, lv) {
		return Step{}, true
	}
	retryAt := finished(a).Add(lv.Backoff << (a.Try - 1))
	if now.Before(retryAt) {
		return Step{Kind: DoWait, Level: level, Agent: agent, Until: retryAt,
			Reason: fmt.Sprintf("retry %d of agent %s after backoff", a.Try, agent)}, false
	}
	return Step{Kind: DoFence, Level: level, Agent: agent, Try: a.Try + 1}, false
}

func finished(a *v1alpha1.Attempt) time.Time {
	if a.Finished != nil {
		return a.Finished.Time
	}
	return a.Started.Time
}

// latest returns the newest attempt of agent at level, or nil.
func latest(st *v1alpha1.NodeFenceStatus, level int32, agent string) *v1alpha1.Attempt {
	for i := len(st.Attempts) - 1; i >= 0; i-- {
		if a := &st.Attempts[i]; a.Level == level && a.Agent == agent {
			return a
		}
	}
	return nil
}

func failureSummary(st *v1alpha1.NodeFenceStatus) string {
	msg := "all fencing levels failed"
	for i := len(st.Attempts) - 1; i >= 0; i-- {
		if a := st.Attempts[i]; a.State == v1alpha1.AttemptFailed {
			return fmt.Sprintf("%s; last: level %d agent %s try %d: %s", msg, a.Level, a.Agent, a.Try, a.Error)
		}
	}
	return msg
}

func micro(t time.Time) metav1.MicroTime { return metav1.NewMicroTime(t) }
