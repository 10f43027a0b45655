package fencer

import (
	"fmt"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// EventKind is what happened.
type EventKind string

const (
	// FenceIssued: a Fence call is about to be made. Recorded before the call, so that a
	// crash during the call leaves an attempt that is re-issued, never forgotten.
	FenceIssued EventKind = "FenceIssued"
	// FenceReturned: the Fence call returned (Err nil or not).
	FenceReturned EventKind = "FenceReturned"
	// StateRead: a Status call returned (Err nil or not).
	StateRead EventKind = "StateRead"
	// Expired: the attempt passed its deadline without being verified.
	Expired EventKind = "Expired"
	// Skipped: the agent is known to be down (a remote agent failing its health checks);
	// its attempt fails at once, without retries, so the level escalates.
	Skipped EventKind = "Skipped"
	// Contradicted: the target showed life after it must have been fenced (a watchdog
	// level's node, seen alive past its reset); the attempt fails at once, whatever its
	// deadline and without retries (trying again cannot help), with Evidence as its error.
	Contradicted EventKind = "Contradicted"
)

// givenUp reports whether a failed attempt ends its agent's part in the level: after its
// last retry, or at once for an agent that was down, a Permanent error (authentication,
// authorization, a bad parameter, an unknown target: trying again cannot help), or a
// Fence call whose outcome stayed unknown (no state could be read back after it).
func givenUp(a *v1alpha1.Attempt, lv Level) bool {
	switch plugin.ErrorKind(a.ErrorKind) {
	case plugin.KindAgentDown, plugin.KindPermanent, plugin.KindUnknown, plugin.KindTargetMismatch:
		return true
	}
	return a.Try > lv.Retries
}

// Event is the outcome of carrying out a Step.
type Event struct {
	Kind  EventKind
	Level int32
	Agent string
	Try   int32
	// Target is, on FenceIssued, the device the call goes to: recorded on a new attempt,
	// and ignored on a re-issue, which goes to the attempt's recorded target.
	Target string
	// State is the power state the agent read: "on", "off" or "unknown".
	State    string
	Evidence string
	Err      error
	// ErrKind classifies Err: an agent's kind (plugin.KindOf), or the caller's
	// plugin.KindAgentDied, KindAgentDown or KindTimeout. A Fence call that timed out or
	// whose agent died has an unknown outcome (unknownOutcome).
	ErrKind plugin.ErrorKind
}

// StateFenced is the state an agent reads back from a fenced target.
const StateFenced = "off"

// Apply records ev in st at now and moves the fence on: to the next level when the
// current one has failed, to a verified level when it is verified. It never sets the
// phase: the controller moves it (Next says Done or GiveUp), through CanMove.
func Apply(st *v1alpha1.NodeFenceStatus, plan Plan, ev Event, now time.Time) error {
	level := max(st.Level, 1)
	if ev.Level != level {
		return fmt.Errorf("event for level %d, incident is at level %d", ev.Level, level)
	}
	if int(level) > len(plan.Levels) {
		return fmt.Errorf("incident is past its last level")
	}
	lv := plan.Levels[level-1]
	st.Level = level
	if ev.Kind == FenceIssued || ev.Kind == Skipped {
		issue(st, lv, ev, now)
		if ev.Kind == FenceIssued {
			return nil
		}
	}
	a := latest(st, level, ev.Agent)
	if a == nil || a.Try != ev.Try {
		return fmt.Errorf("no try %d of agent %s at level %d", ev.Try, ev.Agent, level)
	}
	if a.State == v1alpha1.AttemptVerified || a.State == v1alpha1.AttemptFailed {
		return fmt.Errorf("try %d of agent %s is already %s", ev.Try, ev.Agent, a.State)
	}
	record(a, ev, now, lv.readBack())
	settle(st, lv, now)
	return nil
}

func issue(st *v1alpha1.NodeFenceStatus, lv Level, ev Event, now time.Time) {
	if a := latest(st, ev.Level, ev.Agent); a != nil && a.Try == ev.Try && a.State == v1alpha1.AttemptFencing {
		// Re-issue after a lost outcome: same attempt, same deadline.
		return
	}
	st.Attempts = append(st.Attempts, v1alpha1.Attempt{
		Level: ev.Level, Agent: ev.Agent, Try: ev.Try, State: v1alpha1.AttemptFencing, Target: ev.Target,
		Started: micro(now), Deadline: micro(now.Add(lv.Timeout)),
	})
}

// keepFenceEvidence adds what a Fence call answered to a's FenceEvidence, one answer per
// line: re-issues of one attempt each add theirs. An answer that would not fit whole
// (v1alpha1.MaxFenceEvidence) is not kept: a restore record cut in the middle could not
// be read, and the first answers, which did the removing, are the ones that matter.
func keepFenceEvidence(a *v1alpha1.Attempt, evidence string) {
	if evidence == "" {
		return
	}
	kept := a.FenceEvidence
	if kept != "" {
		kept += "\n"
	}
	if kept += evidence; len(kept) <= v1alpha1.MaxFenceEvidence {
		a.FenceEvidence = kept
	}
}

func record(a *v1alpha1.Attempt, ev Event, now time.Time, readBack time.Duration) {
	if ev.Kind == FenceReturned && ev.Err != nil && lostOutcome(ev.ErrKind) {
		unknownOutcome(a, ev.Err.Error(), now, readBack)
		return
	}
	if a.State == v1alpha1.AttemptFencing && (ev.Kind == StateRead || ev.Kind == Expired) {
		lostInFlight(a, now, readBack)
		if ev.Kind == Expired {
			// The read back starts now; the attempt is judged at its end.
			return
		}
	}
	if ev.Evidence != "" {
		a.Evidence = ev.Evidence
	}
	if ev.Kind == FenceReturned {
		keepFenceEvidence(a, ev.Evidence)
	}
	if ev.State != "" {
		a.PowerState = ev.State
	}
	fail := func(kind plugin.ErrorKind, msg string) {
		a.State, a.ErrorKind, a.Error = v1alpha1.AttemptFailed, string(kind), msg
		t := micro(now)
		a.Finished = &t
	}
	if ev.Err != nil && ev.ErrKind == plugin.KindTargetMismatch && (ev.Kind == FenceReturned || ev.Kind == StateRead) {
		// The device proved another machine's before the agent sent anything (Mismatched).
		fail(ev.ErrKind, ev.Err.Error())
		return
	}
	switch ev.Kind {
	case FenceReturned:
		if ev.Err != nil {
			fail(ev.ErrKind, ev.Err.Error())
			return
		}
		// The agent's word is not enough: the state is read back separately, and for
		// at least readBack, since a device may act seconds after it acknowledged.
		a.State = v1alpha1.AttemptVerifying
		readBackUntil(a, now, readBack)
	case StateRead:
		if ev.Err == nil && ev.State == StateFenced {
			a.State = v1alpha1.AttemptVerified
			t := micro(now)
			a.Finished = &t
		}
		// Anything else keeps verifying until the deadline: a BMC may report the old
		// state for a moment, and a failed read proves nothing either way.
	case Skipped:
		fail(plugin.KindAgentDown, ev.Err.Error())
	case Contradicted:
		fail(plugin.KindPermanent, "contradicted: "+ev.Evidence)
	case Expired:
		last, kind := a.PowerState, plugin.KindTimeout
		if last == "" {
			last = "never read"
			if a.ErrorKind == string(plugin.KindUnknown) {
				// The call timed out and nothing could be read back since: whether the
				// action landed is unknown, and this agent's path is not answering.
				kind = plugin.KindUnknown
			}
		}
		msg := fmt.Sprintf("not verified fenced by %s (last state read: %s)", a.Deadline.UTC().Format(time.RFC3339), last)
		if a.ErrorKind == string(plugin.KindUnknown) {
			msg = a.Error + "; " + msg
		}
		fail(kind, msg)
	}
}

// lostOutcome reports whether a Fence call that ended with kind may have sent its
// command without anyone seeing what became of it: the call timed out, the agent
// process (or a remote agent's connection) died during it, or the device acknowledged
// the off and the agent gave up reading it back (NotVerified): a slow device may still
// act on it.
func lostOutcome(kind plugin.ErrorKind) bool {
	return kind == plugin.KindTimeout || kind == plugin.KindAgentDied || kind == plugin.KindNotVerified
}

// lostInFlight records an attempt found still Fencing by a sync that did not send its
// call: it was written before the call, and the call's outcome was lost to a crash, a
// handover or a failed save. The call may have reached the device, so its outcome is
// unknown, and it is read back, never sent again. Whatever sent it has ended by now (a
// replica that lost its Lease exits and stops its agents; one that slept re-reads the
// Lease before it sends; a failed save follows a call that returned), so the device acts
// on it, if at all, within its stated delay from now: the read back lasts that long,
// whatever was left of the attempt's own deadline, and a call that was written and never
// sent costs one read back, not the level's timeout.
func lostInFlight(a *v1alpha1.Attempt, now time.Time, readBack time.Duration) {
	unknownOutcome(a, fmt.Sprintf("the Fence call sent at %s was found in flight", Stamp(a.Started.Time)), now, readBack)
	a.Deadline = micro(now.Add(readBack))
}

// unknownOutcome records a Fence call whose outcome was lost (lostOutcome). It is
// unknown, not failed: the command may have landed just before, or after, the call ended
// (a real BMC was seen to act 8 ms after the call returned; a slow one acts seconds after
// it acknowledged), and may still be pending in the device. The attempt goes on verifying
// until its deadline and for at least readBack, so the target's state is read back before
// anything retries, escalates or gives up, and no other Fence call of the agent is sent
// while the lost one may still land: read back off, the fence holds; read back on, the
// try failed; nothing read, the agent gives up its level (plugin.KindUnknown). A second
// off sent while the first was pending would land after the first was verified and the
// node released, and could power off a node that was back on a new boot.
func unknownOutcome(a *v1alpha1.Attempt, why string, now time.Time, readBack time.Duration) {
	a.State, a.ErrorKind = v1alpha1.AttemptVerifying, string(plugin.KindUnknown)
	a.Error = "outcome unknown: " + why
	a.PowerState = ""
	readBackUntil(a, now, readBack)
}

// readBackUntil moves a's deadline to at least now+readBack: an off that may still land
// is read back that long before anything retries, escalates or gives up.
func readBackUntil(a *v1alpha1.Attempt, now time.Time, readBack time.Duration) {
	if d := now.Add(readBack); d.After(a.Deadline.Time) {
		a.Deadline = micro(d)
	}
}

// settle moves the incident on once the current level is decided.
func settle(st *v1alpha1.NodeFenceStatus, lv Level, now time.Time) {
	if Mismatched(st) != "" {
		return // held where it is: no next level
	}
	verified, exhausted := 0, 0
	for _, agent := range lv.Agents {
		a := latest(st, st.Level, agent)
		switch {
		case a == nil:
		case a.State == v1alpha1.AttemptVerified:
			verified++
		case a.State == v1alpha1.AttemptFailed && givenUp(a, lv):
			exhausted++
		}
	}
	n := len(lv.Agents)
	done := verified == n || (lv.Mode == v1alpha1.ModeAny && verified > 0)
	failed := (lv.Mode == v1alpha1.ModeAll && exhausted > 0) || exhausted == n
	switch {
	case done:
		st.VerifiedLevel = st.Level
	case failed:
		st.Level++
	}
}
