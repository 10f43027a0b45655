package fencer

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// slowBMC acknowledges an off at once and acts on it delay later: what a slow BMC does.
type slowBMC struct {
	delay time.Duration
	offs  []time.Time
}

func (b *slowBMC) off(now time.Time) { b.offs = append(b.offs, now) }

func (b *slowBMC) state(now time.Time) string {
	if len(b.offs) > 0 && !now.Before(b.offs[0].Add(b.delay)) {
		return StateFenced
	}
	return "on"
}

// resumeAgainst drives st from now the way the controller does, with bmc as the ipmi
// agent's device, until Done or GiveUp, and returns the kinds of the steps taken.
func resumeAgainst(t *testing.T, st *v1alpha1.NodeFenceStatus, plan Plan, bmc *slowBMC, now time.Time) []Kind {
	t.Helper()
	var kinds []Kind
	for range 1000 {
		step := Next(st, plan, now)
		kinds = append(kinds, step.Kind)
		ev := Event{Level: step.Level, Agent: step.Agent, Try: step.Try}
		switch step.Kind {
		case Done, GiveUp:
			return kinds
		case DoWait:
			now = step.Until
			continue
		case DoExpire:
			ev.Kind = Expired
		case DoFence:
			mustApply(t, st, plan, Event{Kind: FenceIssued, Level: step.Level, Agent: step.Agent, Try: step.Try}, now)
			bmc.off(now)
			ev.Kind = FenceReturned
		case DoVerify:
			ev.Kind, ev.State = StateRead, bmc.state(now)
			now = now.Add(plan.PollInterval)
		}
		mustApply(t, st, plan, ev, now)
	}
	t.Fatal("machine did not finish in 1000 steps")
	return nil
}

// TestLostOutcomeIsReadBackFirst: an off whose outcome is unknown is read back before
// anything else, and no second off goes out while the first may still land. The BMC
// acts 3 s after it acknowledges (12 s for the call found past its deadline). Before this
// rule, a call found in flight was sent again at once, and a NotVerified one after its
// backoff: the second off then landed on the node's next boot.
func TestLostOutcomeIsReadBackFirst(t *testing.T) {
	plan := twoLevels(v1alpha1.ModeAll)
	plan.Levels[0].Agents = []string{"ipmi"}
	issued := func(st *v1alpha1.NodeFenceStatus, bmc *slowBMC) {
		mustApply(t, st, plan, Event{Kind: FenceIssued, Level: 1, Agent: "ipmi", Try: 1}, t0)
		bmc.off(t0)
	}
	for name, tc := range map[string]struct {
		delay time.Duration
		// lose leaves st as the lost call left it, and says when the next sync runs.
		lose func(st *v1alpha1.NodeFenceStatus, bmc *slowBMC) time.Time
	}{
		// A crash, a clean handover or a failed save right after the Fence call: the
		// attempt is still Fencing in the record the next sync reads.
		"found in flight on resume, handover or a failed save": {3 * time.Second, func(st *v1alpha1.NodeFenceStatus, bmc *slowBMC) time.Time {
			issued(st, bmc)
			return t0.Add(time.Second)
		}},
		"found in flight past its deadline": {12 * time.Second, func(st *v1alpha1.NodeFenceStatus, bmc *slowBMC) time.Time {
			issued(st, bmc)
			return t0.Add(11 * time.Second)
		}},
		"NotVerified after an acknowledged off": {3 * time.Second, func(st *v1alpha1.NodeFenceStatus, bmc *slowBMC) time.Time {
			issued(st, bmc)
			mustApply(t, st, plan, Event{Kind: FenceReturned, Level: 1, Agent: "ipmi", Try: 1, State: "on",
				Err: errors.New("power off not verified within 2s: the bmc still reports on"), ErrKind: plugin.KindNotVerified}, t0.Add(2*time.Second))
			return t0.Add(2 * time.Second)
		}},
		"acknowledged just before the deadline": {3 * time.Second, func(st *v1alpha1.NodeFenceStatus, bmc *slowBMC) time.Time {
			mustApply(t, st, plan, Event{Kind: FenceIssued, Level: 1, Agent: "ipmi", Try: 1}, t0)
			bmc.off(t0.Add(9500 * time.Millisecond))
			mustApply(t, st, plan, Event{Kind: FenceReturned, Level: 1, Agent: "ipmi", Try: 1, State: "on"}, t0.Add(9500*time.Millisecond))
			return t0.Add(9500 * time.Millisecond)
		}},
	} {
		t.Run(name, func(t *testing.T) {
			st := &v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing}
			bmc := &slowBMC{delay: tc.delay}
			from := tc.lose(st, bmc)
			kinds := resumeAgainst(t, st, plan, bmc, from)
			if kinds[0] != DoVerify && kinds[0] != DoExpire {
				t.Errorf("first step after the loss: %s, want a read back (Verify, or Expire that starts one)", kinds[0])
			}
			if len(bmc.offs) != 1 {
				t.Errorf("%d offs sent (at %v), want exactly one", len(bmc.offs), bmc.offs)
			}
			if st.VerifiedLevel != 1 {
				t.Errorf("verified level %d, want 1 (steps %v)", st.VerifiedLevel, kinds)
			}
		})
	}
}

// TestLostOutcomeReadBackOnThenRetried: a call found in flight and read back on through
// the whole read back (the device's stated delay, from when it was found) did not land
// and will not: the retry may go out then, and not before (the floor), whatever the
// device's delay; and not only at the level's deadline (a call written and never sent
// costs one read back, not the level's timeout).
func TestLostOutcomeReadBackOnThenRetried(t *testing.T) {
	for _, delay := range []time.Duration{0, 45 * time.Second} {
		t.Run(fmt.Sprintf("offDelay %s", delay), func(t *testing.T) {
			plan := twoLevels(v1alpha1.ModeAll)
			plan.Levels[0].Agents, plan.Levels[0].Timeout = []string{"ipmi"}, time.Minute
			plan.Levels[0].ReadBack = delay
			st := &v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing}
			mustApply(t, st, plan, Event{Kind: FenceIssued, Level: 1, Agent: "ipmi", Try: 1}, t0)
			resumed := t0.Add(time.Second)
			now := retryAfterLostCall(t, st, plan, resumed)
			floor := resumed.Add(max(delay, DefaultReadBack))
			if now.Before(floor) {
				t.Errorf("retry at %s, before the read back's end %s", now, floor)
			}
			if limit := floor.Add(plan.Levels[0].Backoff + time.Second); now.After(limit) {
				t.Errorf("retry at %s, after %s: it waited for more than the read back and the backoff", now, limit)
			}
			if step := Next(st, plan, now); step.Try != 2 {
				t.Errorf("retry is try %d, want 2", step.Try)
			}
		})
	}
}

// retryAfterLostCall drives st from resumed against a device that never goes off until
// the machine's next step is a Fence call, and returns when that is.
func retryAfterLostCall(t *testing.T, st *v1alpha1.NodeFenceStatus, plan Plan, resumed time.Time) time.Time {
	t.Helper()
	bmc := &slowBMC{delay: time.Hour} // the lost off never lands
	now := resumed
	for range 10000 {
		step := Next(st, plan, now)
		ev := Event{Level: step.Level, Agent: step.Agent, Try: step.Try}
		switch step.Kind {
		case DoFence:
			return now
		case DoVerify:
			ev.Kind, ev.State = StateRead, bmc.state(now)
			now = now.Add(plan.PollInterval)
		case DoExpire:
			ev.Kind = Expired
		case DoWait:
			now = step.Until
			continue
		default:
			t.Fatalf("step %s before the retry", step.Kind)
		}
		mustApply(t, st, plan, ev, now)
	}
	t.Fatal("no retry in 10000 steps")
	return now
}
