package fencer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func twoLevels(mode v1alpha1.LevelMode) Plan {
	return Plan{PollInterval: 100 * time.Millisecond, Levels: []Level{
		{Agents: []string{"ipmi", "redfish"}, Mode: mode, Timeout: 10 * time.Second, Retries: 1, Backoff: time.Second},
		{Agents: []string{"iscsi"}, Mode: v1alpha1.ModeAll, Timeout: 10 * time.Second, Retries: 0, Backoff: time.Second},
	}}
}

// agentBehaviour scripts what one agent does: fails the Fence call, reads back a state,
// or never answers in time.
type agentBehaviour struct {
	fenceErr error
	// errKind is fenceErr's kind; Retryable when empty.
	errKind plugin.ErrorKind
	state   string
	// readErr fails every Status call.
	readErr error
	hang    bool
	// offAfterReads: the first Fence call's off is pending in the device, which reads on
	// for that many Status calls and off from then on (a slow BMC that acts seconds
	// after it acknowledged).
	offAfterReads int
}

// run drives the machine the way the controller does, with a fake clock, and returns
// the final status and the agent calls made, in order.
func run(t *testing.T, plan Plan, agents map[string]agentBehaviour) (*v1alpha1.NodeFenceStatus, []string) {
	t.Helper()
	st := &v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhasePending}
	now := t0
	var calls []string
	reads := map[string]int{}
	for range 5000 {
		step := Next(st, plan, now)
		var ev *Event
		switch step.Kind {
		case Done, GiveUp:
			return st, calls
		case DoWait:
			if !step.Until.After(now) {
				t.Fatalf("wait until %s is not in the future of %s", step.Until, now)
			}
			now = step.Until
			continue
		case DoExpire:
			ev = &Event{Kind: Expired}
		case DoFence:
			mustApply(t, st, plan, Event{Kind: FenceIssued, Level: step.Level, Agent: step.Agent, Try: step.Try}, now)
			calls = append(calls, "fence:"+step.Agent)
			b := agents[step.Agent]
			if b.hang {
				now = now.Add(11 * time.Second)
				continue
			}
			kind := b.errKind
			if kind == "" {
				kind = plugin.KindRetryable
			}
			ev = &Event{Kind: FenceReturned, Err: b.fenceErr, ErrKind: kind}
		case DoVerify:
			calls = append(calls, "status:"+step.Agent)
			b := agents[step.Agent]
			ev = &Event{Kind: StateRead, State: b.state, Err: b.readErr}
			if reads[step.Agent]++; b.offAfterReads > 0 {
				ev.State = "on"
				if reads[step.Agent] > b.offAfterReads {
					ev.State = "off"
				}
			}
			if b.readErr != nil {
				ev.State, ev.ErrKind = "", plugin.KindRetryable
			}
			now = now.Add(plan.PollInterval)
		}
		ev.Level, ev.Agent, ev.Try = step.Level, step.Agent, step.Try
		mustApply(t, st, plan, *ev, now)
	}
	t.Fatal("machine did not finish in 5000 steps")
	return nil, nil
}

func mustApply(t *testing.T, st *v1alpha1.NodeFenceStatus, plan Plan, ev Event, now time.Time) {
	t.Helper()
	if err := Apply(st, plan, ev, now); err != nil {
		t.Fatalf("apply %+v: %v", ev, err)
	}
}

func TestMachine(t *testing.T) {
	errBMC := errors.New("bmc busy")
	off := agentBehaviour{state: "off"}
	on := agentBehaviour{state: "on"}
	tests := map[string]struct {
		plan          Plan
		agents        map[string]agentBehaviour
		wantVerified  int32
		wantCalls     []string
		wantLastError string
	}{
		"level 1 succeeds": {
			plan:         twoLevels(v1alpha1.ModeAny),
			agents:       map[string]agentBehaviour{"ipmi": off},
			wantVerified: 1,
			wantCalls:    []string{"fence:ipmi", "status:ipmi"},
		},
		"level 1 fails with retries, level 2 succeeds": {
			plan:         twoLevels(v1alpha1.ModeAll),
			agents:       map[string]agentBehaviour{"ipmi": {fenceErr: errBMC}, "iscsi": off},
			wantVerified: 2,
			wantCalls:    []string{"fence:ipmi", "fence:ipmi", "fence:iscsi", "status:iscsi"},
		},
		// A wrong password was once retried at the same level before escalating.
		"a Permanent error escalates at once, with no retry at the same level": {
			plan:         twoLevels(v1alpha1.ModeAll),
			agents:       map[string]agentBehaviour{"ipmi": {fenceErr: errors.New("authentication failed"), errKind: plugin.KindPermanent}, "iscsi": off},
			wantVerified: 2,
			wantCalls:    []string{"fence:ipmi", "fence:iscsi", "status:iscsi"},
		},
		"mode any tries the second agent": {
			plan:         twoLevels(v1alpha1.ModeAny),
			agents:       map[string]agentBehaviour{"ipmi": {fenceErr: errBMC}, "redfish": off},
			wantVerified: 1,
			wantCalls:    []string{"fence:ipmi", "fence:redfish", "status:redfish"},
		},
		"mode all needs every agent": {
			plan:         twoLevels(v1alpha1.ModeAll),
			agents:       map[string]agentBehaviour{"ipmi": off, "redfish": off},
			wantVerified: 1,
			wantCalls:    []string{"fence:ipmi", "status:ipmi", "fence:redfish", "status:redfish"},
		},
		"state never reads off: timeout is a failure, never success": {
			plan:          twoLevels(v1alpha1.ModeAll),
			agents:        map[string]agentBehaviour{"ipmi": on, "iscsi": on},
			wantLastError: "not verified fenced",
		},
		"hung agent call expires": {
			plan:          twoLevels(v1alpha1.ModeAll),
			agents:        map[string]agentBehaviour{"ipmi": {hang: true}, "iscsi": {hang: true}},
			wantLastError: "last state read: never read",
		},
		"all levels fail": {
			plan:          twoLevels(v1alpha1.ModeAll),
			agents:        map[string]agentBehaviour{"ipmi": {fenceErr: errBMC}, "iscsi": {fenceErr: errBMC}},
			wantCalls:     []string{"fence:ipmi", "fence:ipmi", "fence:iscsi"},
			wantLastError: "bmc busy",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			st, calls := run(t, tc.plan, tc.agents)
			if st.VerifiedLevel != tc.wantVerified {
				t.Errorf("verified level = %d, want %d", st.VerifiedLevel, tc.wantVerified)
			}
			if tc.wantVerified == 0 {
				if st.Verified() {
					t.Errorf("incident verified, want not verified")
				}
				step := Next(st, tc.plan, t0.Add(time.Hour))
				if step.Kind != GiveUp {
					t.Errorf("final step = %s, want GiveUp", step.Kind)
				}
				if !contains(step.Reason, tc.wantLastError) {
					t.Errorf("give-up reason %q does not mention %q", step.Reason, tc.wantLastError)
				}
			} else if step := Next(st, tc.plan, t0.Add(time.Hour)); step.Kind != Done {
				t.Errorf("final step = %s, want Done", step.Kind)
			}
			if tc.wantCalls != nil && !equalPrefix(calls, tc.wantCalls) {
				t.Errorf("calls = %v, want %v", calls, tc.wantCalls)
			}
		})
	}
}

// TestUnknownOutcome: a Fence call that timed out, or whose agent died, may have landed
// (a real BMC was seen to act 8 ms after the call returned) or be pending still. The
// machine reads the state back before it retries, escalates or gives up, and records
// what it read.
func TestUnknownOutcome(t *testing.T) {
	timedOut := func(state string, readErr error) agentBehaviour {
		return agentBehaviour{fenceErr: context.DeadlineExceeded, errKind: plugin.KindTimeout, state: state, readErr: readErr}
	}
	died := func(state string, offAfterReads int) agentBehaviour {
		b := agentBehaviour{fenceErr: plugin.ErrAgentDied, errKind: plugin.KindAgentDied, state: state, offAfterReads: offAfterReads}
		if state == "" {
			b.readErr = errors.New("agent process died")
		}
		return b
	}
	for name, tc := range map[string]struct {
		ipmi         agentBehaviour
		wantVerified int32
		wantFences   int // Fence calls to ipmi
		wantKind     plugin.ErrorKind
	}{
		"timed out, read back off: verified off":           {timedOut("off", nil), 1, 1, plugin.KindUnknown},
		"timed out, read back on: retried, then escalated": {timedOut("on", nil), 2, 2, plugin.KindTimeout},
		"timed out, read-back fails: escalated at once":    {timedOut("", errors.New("connection refused")), 2, 1, plugin.KindUnknown},
		// The agent process killed mid-call, its off pending in a slow BMC for 3 s: the
		// earlier off is read back, and no second off is sent that could land after the
		// node was released and back on.
		"agent died, its off lands 3 s later: verified, no second off": {died("on", 30), 1, 1, plugin.KindUnknown},
		"agent died, read back on until the deadline: then retried":    {died("on", 0), 2, 2, plugin.KindTimeout},
		"agent died, read-back fails: escalated at once":               {died("", 0), 2, 1, plugin.KindUnknown},
	} {
		t.Run(name, func(t *testing.T) {
			plan := twoLevels(v1alpha1.ModeAll)
			plan.Levels[0].Agents = []string{"ipmi"}
			st, calls := run(t, plan, map[string]agentBehaviour{"ipmi": tc.ipmi, "iscsi": {state: "off"}})
			if st.VerifiedLevel != tc.wantVerified {
				t.Fatalf("verified level %d, want %d (calls %v)", st.VerifiedLevel, tc.wantVerified, calls)
			}
			fences, reads := 0, 0
			for _, c := range calls {
				switch c {
				case "fence:ipmi":
					fences++
				case "status:ipmi":
					reads++
				}
			}
			if fences != tc.wantFences || reads == 0 {
				t.Errorf("ipmi: %d Fence and %d Status calls, want %d Fence and a read-back (calls %v)", fences, reads, tc.wantFences, calls)
			}
			first := st.Attempts[0]
			if first.ErrorKind != string(tc.wantKind) || !contains(first.Error, "outcome unknown") {
				t.Errorf("first attempt: kind %q error %q, want kind %q and the unknown outcome recorded", first.ErrorKind, first.Error, tc.wantKind)
			}
		})
	}
}
