package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/app"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/podrelease"
	"github.com/kubefence/kubefence/pkg/testpoint"
)

// TestLeaderPausedAtEachStep: the leader stops itself (SIGSTOP, through the
// controller's test pause point) at one step of an incident, the standby takes over, and
// the old leader is resumed once the incident is remediated. At every point: one
// NodeFence for the node, no Event from the deposed leader created after the takeover,
// the deposed leader exits with code 2 and none of its agents outlives it by 2 s, and
// the fence finishes within the lease duration + retry period + the agent's time.
func TestLeaderPausedAtEachStep(t *testing.T) {
	t.Parallel()
	for _, point := range []string{testpoint.AfterCreate, testpoint.BeforeFenceCall, testpoint.AfterFenced,
		testpoint.DeletePod, testpoint.DeleteVolumeAttachment} {
		t.Run(point, func(t *testing.T) { pausedLeader(t, point) })
	}
}

// agentTime is what the fence itself may take once a leader acts: power off (the sim's
// BMC answers in well under a second), its read-back, and the release.
const agentTime = 10 * time.Second

func pausedLeader(t *testing.T, point string) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h := fastHarnessWith(t, ctx, HarnessOptions{Config: func(c *v1alpha1.Config) {
		c.LeaderElection.LeaseDuration = metav1.Duration{Duration: haLeaseDuration}
		c.LeaderElection.RenewDeadline = metav1.Duration{Duration: haRenewDeadline}
		c.LeaderElection.RetryPeriod = metav1.Duration{Duration: haRetryPeriod}
	}})
	victim := deployWeb(t, ctx, h.Cluster)
	leader, newID := leaderAndStandby(t, ctx, h, point)
	oldID := identityOf(t, ctx, leader)
	h.Cluster.Node(victim).Crash()
	pollLog(t, ctx, leader, `"Pausing at test point" point="`+point+`"`)
	paused := time.Now()
	agents := childPIDs(leader.p.pid())
	takeover := waitHolder(t, ctx, h, newID)
	nf := waitReleased(t, ctx, h, victim)
	// Both taints are on the incident's record, whichever replica added them: a leader
	// paused after its first taint (at delete-pod) had saved nothing since, and the
	// standby took the taint as the incident's from its owner mark on the node, so that
	// recovery removes it (podrelease.OwnerAnnotation).
	if got := nf.Status.Remediation.TaintsAdded; !slices.Contains(got, podrelease.FencedTaint.Key) || !slices.Contains(got, podrelease.OutOfServiceTaint.Key) {
		t.Errorf("taints recorded %v, want %s and %s", got, podrelease.FencedTaint.Key, podrelease.OutOfServiceTaint.Key)
	}
	remediated := stepTime(t, nf, v1alpha1.StepRemediated)
	budget := haLeaseDuration + haRetryPeriod + agentTime
	if point == testpoint.BeforeFenceCall {
		// The call was written ahead and not sent: the standby finds it in flight and reads
		// it back for the device's stated delay, then retries after the level's backoff.
		budget += fencer.DefaultReadBack + v1alpha1.DefaultLevelBackoff
	}
	if remediated.Sub(paused) > budget {
		t.Errorf("remediated %s after the leader paused, more than lease + retry + agent time (%s)", remediated.Sub(paused), budget)
	}
	t.Logf("paused at %s; standby took over %s later; remediated %s after the pause",
		point, takeover.Sub(paused).Round(time.Millisecond), remediated.Sub(paused).Round(time.Millisecond))

	if err := leader.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leader.Done():
	case <-ctx.Done():
		t.Fatalf("resumed leader never exited")
	}
	exited := time.Now()
	if code := leader.ExitCode(); code != app.ExitDeposed {
		t.Errorf("resumed leader exited with %d, want %d", code, app.ExitDeposed)
	}
	for _, pid := range agents {
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Second, true, func(context.Context) (bool, error) {
			return processDead(pid), nil
		})
		if err != nil {
			t.Errorf("agent %d of the deposed leader alive %s after it exited", pid, time.Since(exited).Round(time.Millisecond))
		}
	}
	checkOneIncident(t, ctx, h, victim)
	checkNoLateEvents(t, ctx, h, oldID, paused, takeover)
	// Nothing the deposed leader did after it woke reached an agent.
	if _, woke, ok := strings.Cut(leader.Log(), `"Pausing at test point"`); ok {
		for _, step := range []string{v1alpha1.StepAgentReturned, v1alpha1.StepAgentError} {
			if strings.Contains(woke, `step="`+step+`"`) {
				t.Errorf("the deposed leader called its agent after it woke (a %s step in its log):\n%s", step, lastLines(woke, 20))
			}
		}
	}
}

// waitHolder waits until identity holds the controller's Lease and returns when it
// acquired it.
func waitHolder(t *testing.T, ctx context.Context, h *Harness, identity string) time.Time {
	t.Helper()
	var at time.Time
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l := controllerLease(t, ctx, h)
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != identity || l.Spec.AcquireTime == nil {
			return false, nil
		}
		at = l.Spec.AcquireTime.Time
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s never took the lead: %v", identity, err)
	}
	return at
}

func stepTime(t *testing.T, nf v1alpha1.NodeFence, typ string) time.Time {
	t.Helper()
	at, ok := stepAt(nf, typ)
	if !ok {
		t.Fatalf("incident %s has no %s step", nf.Name, typ)
	}
	return at
}

func checkOneIncident(t *testing.T, ctx context.Context, h *Harness, node string) {
	t.Helper()
	incs, err := Incidents(ctx, h.Cluster, node)
	if err != nil {
		t.Fatal(err)
	}
	if len(incs) != 1 {
		var names []string
		for _, nf := range incs {
			names = append(names, fmt.Sprintf("%s (%s)", nf.Name, nf.Status.Phase))
		}
		t.Errorf("%d incidents for %s, want 1: %v", len(incs), node, names)
	}
}

// checkNoLateEvents fails for any Event the deposed replica created after the takeover;
// creationTimestamp is the API server's, so it tells when the Event landed, whenever the
// replica generated it.
// checkNoLateEvents: no Event the deposed leader recorded after it paused reached the API
// server. One it recorded just before the pause may still land when it wakes: the Event
// sink checks the leader's confirmation before each send, but a process stopped between
// that check and its socket write sends on waking, and only the API server could refuse
// it (Events have no precondition). Such an Event is logged, with when it was recorded.
func checkNoLateEvents(t *testing.T, ctx context.Context, h *Harness, identity string, paused, takeover time.Time) {
	t.Helper()
	events, err := h.Cluster.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if eventSource(e) != identity || !e.CreationTimestamp.After(takeover) {
			continue
		}
		// Event timestamps are whole seconds: a second's grace around the pause.
		if recorded := e.FirstTimestamp.Time; recorded.After(paused.Add(time.Second)) {
			t.Errorf("deposed leader's event %s %q, recorded at %s after it paused at %s, landed at %s, after the takeover at %s",
				e.Reason, e.Message, recorded.Format(time.RFC3339), paused.Format(time.RFC3339Nano),
				e.CreationTimestamp.Format(time.RFC3339), takeover.Format(time.RFC3339Nano))
			continue
		}
		t.Logf("deposed leader's event %s, recorded at %s before it paused, landed on waking at %s",
			e.Reason, e.FirstTimestamp.Format(time.RFC3339), e.CreationTimestamp.Format(time.RFC3339))
	}
}

func eventSource(e corev1.Event) string {
	if e.ReportingInstance != "" {
		return e.ReportingInstance
	}
	return e.Source.Host
}
