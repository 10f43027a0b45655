package sim

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/testpoint"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// TestGenuineRebootNeverContradicts: a fenced node power cycled with a new
// boot ID, at several delays after the fence (the first faster than the node-monitor
// grace period), recovers without FenceContradicted. The simulated kubelet renews its
// Lease before it posts the status with its new boot ID, as a real one may.
func TestGenuineRebootNeverContradicts(t *testing.T) {
	t.Parallel()
	for _, delay := range []time.Duration{0, 2 * time.Second, 6 * time.Second} {
		t.Run(delay.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			h, victim, nf := fencedVictim(t, ctx, nil)
			if err := sleepUntil(ctx, stepTime(t, nf, v1alpha1.StepRemediated).Add(delay)); err != nil {
				t.Fatal(err)
			}
			powerOn(t, ctx, h, victim)
			final, err := waitOnlyIncident(ctx, h, victim, recovered)
			if err != nil {
				t.Fatalf("incident of %s not recovered: phase %s", victim, final.Status.Phase)
			}
			if c := meta.FindStatusCondition(final.Status.Conditions, v1alpha1.ConditionContradiction); c != nil {
				t.Errorf("FenceContradicted on a genuine reboot: %+v", c)
			}
			for _, s := range final.Status.Timeline {
				if s.Type == v1alpha1.StepContradiction {
					t.Errorf("contradiction recorded at %s: %s", s.Time.Format(time.RFC3339Nano), s.Message)
				}
			}
			events, err := h.Cluster.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + v1alpha1.ReasonFenceContradicted})
			if err != nil {
				t.Fatal(err)
			}
			if len(events.Items) > 0 {
				t.Errorf("FenceContradicted event on a genuine reboot: %s", events.Items[0].Message)
			}
		})
	}
}

// TestAPIServerDownDuringPowerOff: the API server goes down after the BMC
// took the power-off and before its answer is recorded. The NodeFence history still
// shows the call, sent before the BMC logged it, and the re-issue after the restart
// names the call whose outcome was lost.
func TestAPIServerDownDuringPowerOff(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// A Lease that outlasts the pause and the outage: this leader must stay leader.
	h := fastHarness(t, ctx, func(c *v1alpha1.Config) {
		c.LeaderElection.LeaseDuration = metav1.Duration{Duration: time.Minute}
		c.LeaderElection.RenewDeadline = metav1.Duration{Duration: 45 * time.Second}
	})
	victim := deployWeb(t, ctx, h.Cluster)
	leader, err := h.StartControllerWithEnv("controller", []string{testpoint.Env + "=" + testpoint.AfterFenceCall})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	h.Cluster.Node(victim).Crash()
	pollLog(t, ctx, leader, `"Pausing at test point" point="`+testpoint.AfterFenceCall+`"`)
	err = h.Cluster.RestartAPIServer(ctx, func(ctx context.Context) error {
		if err := leader.Signal(syscall.SIGCONT); err != nil {
			return err
		}
		// Long enough for the resumed leader to fail its save against a dead API server.
		return sleepUntil(ctx, time.Now().Add(2*time.Second))
	})
	if err != nil {
		t.Fatal(err)
	}
	nf := waitReleased(t, ctx, h, victim)
	events, err := h.BMCs[victim].Events()
	if err != nil {
		t.Fatal(err)
	}
	var off time.Time
	for _, e := range events {
		if e.Source != "sim" && (e.Action == bmc.ActionOff || e.Action == bmc.ActionOffRequested) {
			off = e.Time
			break
		}
	}
	if off.IsZero() {
		t.Fatalf("BMC of %s logged no power-off: %+v", victim, events)
	}
	var calls []v1alpha1.Step
	for _, s := range nf.Status.Timeline {
		if s.Type == v1alpha1.StepAgentCalled {
			calls = append(calls, s)
		}
	}
	if len(calls) == 0 || calls[0].Time.After(off) {
		t.Fatalf("no call recorded before the BMC logged power off at %s: %+v", off.Format(time.RFC3339Nano), calls)
	}
	t.Logf("call recorded at %s, BMC off at %s; %d calls", calls[0].Time.Format(time.RFC3339Nano), off.Format(time.RFC3339Nano), len(calls))
	if len(calls) > 1 && !strings.Contains(calls[1].Message, "re-issued: the outcome of the call sent at") {
		t.Errorf("re-issue does not name the lost call: %s", calls[1].Message)
	}
}
