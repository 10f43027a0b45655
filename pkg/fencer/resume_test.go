package fencer

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func equalPrefix(got, want []string) bool {
	if len(got) < len(want) {
		return false
	}
	for i := range want {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func attempt(agent string, try int32, state v1alpha1.AttemptState, started time.Time) v1alpha1.Attempt {
	return v1alpha1.Attempt{Level: 1, Agent: agent, Try: try, State: state,
		Started: metav1.NewMicroTime(started), Deadline: metav1.NewMicroTime(started.Add(10 * time.Second))}
}

// TestResume checks what a new leader does with each persisted state of an incident.
func TestResume(t *testing.T) {
	plan := twoLevels(v1alpha1.ModeAll)
	failedAt := metav1.NewMicroTime(t0.Add(time.Second))
	failed := attempt("ipmi", 1, v1alpha1.AttemptFailed, t0)
	failed.Finished = &failedAt
	tests := map[string]struct {
		status v1alpha1.NodeFenceStatus
		now    time.Time
		want   Step
	}{
		"pending: first call": {
			status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhasePending},
			now:    t0,
			want:   Step{Kind: DoFence, Level: 1, Agent: "ipmi", Try: 1},
		},
		"fence call in flight when the leader died: read back, never re-issued": {
			status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Level: 1,
				Attempts: []v1alpha1.Attempt{attempt("ipmi", 1, v1alpha1.AttemptFencing, t0)}},
			now:  t0.Add(2 * time.Second),
			want: Step{Kind: DoVerify, Level: 1, Agent: "ipmi", Try: 1},
		},
		"fence call in flight past its deadline: expired": {
			status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Level: 1,
				Attempts: []v1alpha1.Attempt{attempt("ipmi", 1, v1alpha1.AttemptFencing, t0)}},
			now:  t0.Add(time.Minute),
			want: Step{Kind: DoExpire, Level: 1, Agent: "ipmi", Try: 1},
		},
		"verifying: read the state again": {
			status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Level: 1,
				Attempts: []v1alpha1.Attempt{attempt("ipmi", 1, v1alpha1.AttemptVerifying, t0)}},
			now:  t0.Add(time.Second),
			want: Step{Kind: DoVerify, Level: 1, Agent: "ipmi", Try: 1},
		},
		"failed try within backoff: wait": {
			status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Level: 1, Attempts: []v1alpha1.Attempt{failed}},
			now:    t0.Add(1500 * time.Millisecond),
			want:   Step{Kind: DoWait, Level: 1, Agent: "ipmi", Until: t0.Add(2 * time.Second)},
		},
		"failed try after backoff: retry": {
			status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Level: 1, Attempts: []v1alpha1.Attempt{failed}},
			now:    t0.Add(3 * time.Second),
			want:   Step{Kind: DoFence, Level: 1, Agent: "ipmi", Try: 2},
		},
		"fenced: done, nothing re-issued": {
			status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFenced, Level: 1, VerifiedLevel: 1},
			now:    t0,
			want:   Step{Kind: Done, Level: 1},
		},
		"past the last level: give up": {
			status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Level: 3},
			now:    t0,
			want:   Step{Kind: GiveUp, Reason: "all fencing levels failed"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Next(&tc.status, plan, tc.now)
			if got.Kind == DoWait {
				got.Reason = ""
			}
			if got != tc.want {
				t.Errorf("Next = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestApplyRejectsStaleEvents(t *testing.T) {
	plan := twoLevels(v1alpha1.ModeAll)
	st := &v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Level: 2}
	if err := Apply(st, plan, Event{Kind: FenceReturned, Level: 1, Agent: "ipmi", Try: 1}, t0); err == nil {
		t.Fatal("an event for a level the incident has left was applied")
	}
	st = &v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Level: 1,
		Attempts: []v1alpha1.Attempt{attempt("ipmi", 1, v1alpha1.AttemptVerified, t0)}}
	if err := Apply(st, plan, Event{Kind: Expired, Level: 1, Agent: "ipmi", Try: 1}, t0.Add(time.Hour)); err == nil {
		t.Fatal("a verified attempt was expired")
	}
}

// TestSkippedAgentEscalates: an agent known to be down fails its attempt at once, without
// retries, and the incident moves to the next level.
func TestSkippedAgentEscalates(t *testing.T) {
	plan := twoLevels(v1alpha1.ModeAll)
	st := &v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhasePending}
	ev := Event{Kind: Skipped, Level: 1, Agent: "ipmi", Try: 1, Err: errors.New("agent ipmi is down"), ErrKind: plugin.KindAgentDown}
	if err := Apply(st, plan, ev, t0); err != nil {
		t.Fatal(err)
	}
	if st.Level != 2 {
		t.Fatalf("level after a skipped agent = %d, want 2", st.Level)
	}
	if a := st.Attempts[0]; a.State != v1alpha1.AttemptFailed || a.ErrorKind != string(plugin.KindAgentDown) {
		t.Errorf("skipped attempt = %+v, want Failed with %s", a, plugin.KindAgentDown)
	}
	if got := Next(st, plan, t0); got.Kind != DoFence || got.Level != 2 || got.Agent != "iscsi" {
		t.Errorf("Next = %+v, want Fence iscsi at level 2", got)
	}
}
