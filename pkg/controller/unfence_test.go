package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin/plugintest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// timesOut is an Unfence that runs into its deadline, as a power-on through a slow BMC does.
func timesOut(ctx context.Context, _ plugin.Request) (plugin.Result, error) {
	<-ctx.Done()
	return plugin.Result{}, fmt.Errorf("power on 10.0.0.1: %w", ctx.Err())
}

func reads(st plugin.PowerState) func(context.Context, plugin.Request) (plugin.Result, error) {
	return func(context.Context, plugin.Request) (plugin.Result, error) {
		return plugin.Result{State: st, Evidence: "Chassis Power is " + string(st)}, nil
	}
}

func readFails(context.Context, plugin.Request) (plugin.Result, error) {
	return plugin.Result{}, plugin.Errorf(plugin.KindTargetUnreachable, "status 10.0.0.1: no answer")
}

// fencedByBMC is remediatedIncident with the out-of-service taint recorded as added.
func fencedByBMC(verified time.Time) *v1alpha1.NodeFence {
	nf, _ := remediatedIncident(verified)
	nf.Status.Remediation.TaintsAdded = []string{"node.kubernetes.io/out-of-service"}
	return nf
}

// unfenceController is a controller with one agent, ipmi, whose Unfence calls are bounded
// by a 50ms onTimeout.
func unfenceController(t *testing.T, nf *v1alpha1.NodeFence, agent plugin.Agent, node *corev1.Node) *Controller {
	t.Helper()
	cfg := &v1alpha1.Config{Agents: []v1alpha1.Agent{{Name: "ipmi", Target: v1alpha1.TargetSource{Annotation: "bmc"},
		OnTimeout: metav1.Duration{Duration: 50 * time.Millisecond}}}}
	cfg.Default()
	return fixtureController(t, cfg, plugintest.One{A: agent}, nf, node)
}

func rebootedNode(boot string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: map[string]string{"bmc": "10.0.0.1"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/out-of-service", Effect: corev1.TaintEffectNoExecute}}},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: boot},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

// TestFailedUnfenceIsReadBack: an Unfence that times out or fails has an
// unknown outcome. The state is read back at once and recorded; recovery releases nothing
// (the taint stays) until an Unfence succeeds, and a retry that reads back the same state
// adds no new step.
func TestFailedUnfenceIsReadBack(t *testing.T) {
	verified := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		unfence, status func(context.Context, plugin.Request) (plugin.Result, error)
		phase           v1alpha1.Phase
		step            string // what the timeline must say; empty: no UnfenceFailed step
	}{
		"timed out, read back on: nothing released yet": {timesOut, reads(plugin.StateOn), v1alpha1.PhaseRemediated,
			"agent ipmi Unfence failed, read back on (Chassis Power is on): power on 10.0.0.1: context deadline exceeded"},
		"timed out, read back off": {timesOut, reads(plugin.StateOff), v1alpha1.PhaseRemediated,
			"agent ipmi Unfence failed, read back off (Chassis Power is off): power on 10.0.0.1: context deadline exceeded"},
		"timed out, read-back fails": {timesOut, readFails, v1alpha1.PhaseRemediated,
			"agent ipmi Unfence failed, read back unknown (read back failed: TargetUnreachable: status 10.0.0.1: no answer): power on 10.0.0.1: context deadline exceeded"},
		"unfenced": {reads(plugin.StateOn), readFails, v1alpha1.PhaseRecovered, ""},
	} {
		t.Run(name, func(t *testing.T) {
			nf := fencedByBMC(verified)
			agent := &plugintest.Funcs{UnfenceFunc: tc.unfence, StatusFunc: tc.status}
			node := rebootedNode("boot-2")
			c := unfenceController(t, nf, agent, node)
			c.now = func() time.Time { return verified.Add(time.Minute) }
			obs := detector.Observation{Node: "node-1", Health: detector.Healthy, BootID: "boot-2"}
			for try := 0; try < 2; try++ {
				cur := stored(t, c, nf.Name)
				if cur.Status.Phase != v1alpha1.PhaseRemediated {
					break // drive recovers only a Remediated incident
				}
				_, err := c.recover(context.Background(), cur, node, obs)
				if (err != nil) != (tc.step != "") {
					t.Fatalf("try %d: recover = %v", try, err)
				}
			}
			got := stored(t, c, nf.Name)
			if got.Status.Phase != tc.phase {
				t.Errorf("phase %s, want %s", got.Status.Phase, tc.phase)
			}
			failed := stepsOf(got, v1alpha1.StepUnfenceFailed)
			switch {
			case tc.step == "" && len(failed) != 0:
				t.Errorf("unexpected %s steps: %q", v1alpha1.StepUnfenceFailed, failed)
			case tc.step != "" && (len(failed) != 1 || failed[0] != tc.step):
				t.Errorf("%s steps %q, want exactly [%q]", v1alpha1.StepUnfenceFailed, failed, tc.step)
			}
			if tc.step != "" && strings.Join(agent.Calls(), ",") != "Unfence,Status,Unfence,Status" {
				t.Errorf("calls %v: want each failed Unfence read back once", agent.Calls())
			}
			live, err := c.client.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if released := len(live.Spec.Taints) == 0; released != (tc.phase == v1alpha1.PhaseRecovered) {
				t.Errorf("taints %v with phase %s: a node is released only after an Unfence that succeeded", live.Spec.Taints, got.Status.Phase)
			}
		})
	}
}

// TestTimedOutPowerOnIsReadBack: the Reboot action's power on after a release records the
// state read back after a timed-out call, not the error alone.
func TestTimedOutPowerOnIsReadBack(t *testing.T) {
	verified := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	nf := fencedByBMC(verified)
	agent := &plugintest.Funcs{UnfenceFunc: timesOut, StatusFunc: reads(plugin.StateOn)}
	node := rebootedNode("boot-1")
	c := unfenceController(t, nf, agent, node)
	c.powerOn(context.Background(), nf, node)
	got := stored(t, c, nf.Name)
	want := "agent ipmi power on failed, read back on (Chassis Power is on): power on 10.0.0.1: context deadline exceeded"
	if failed := stepsOf(got, v1alpha1.StepUnfenceFailed); len(failed) != 1 || failed[0] != want {
		t.Errorf("%s steps %q, want [%q]", v1alpha1.StepUnfenceFailed, failed, want)
	}
	if on := stepsOf(got, v1alpha1.StepPoweredOn); len(on) != 0 {
		t.Errorf("PoweredOn recorded for a call that timed out: %q", on)
	}
}

// TestRecoveryUndoesEveryNetworkFence: recovery undoes the verified attempts, and the
// NetworkFence an unverified level left in place (it holds all the same): a node back on
// a new boot gets its storage back.
func TestRecoveryUndoesEveryNetworkFence(t *testing.T) {
	cfg := fixtureConfig()
	cfg.Agents = append(cfg.Agents, v1alpha1.Agent{Name: "storage", NetworkFence: &v1alpha1.NetworkFence{Driver: "rbd.csi.ceph.com"}})
	cfg.Default()
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-1-x"}, Status: v1alpha1.NodeFenceStatus{VerifiedLevel: 2, Attempts: []v1alpha1.Attempt{
		{Level: 1, Agent: "storage", Try: 1, State: v1alpha1.AttemptFailed},
		{Level: 1, Agent: "storage", Try: 2, State: v1alpha1.AttemptFailed},
		{Level: 2, Agent: "ipmi", Try: 1, State: v1alpha1.AttemptVerified},
	}}}
	c := fixtureController(t, cfg, plugintest.One{A: &plugintest.Machine{}}, nf)
	var got []string
	for _, at := range c.attemptsToUndo(nf) {
		got = append(got, fmt.Sprintf("%s/%d", at.Agent, at.Try))
	}
	if want := []string{"ipmi/1", "storage/1"}; !slices.Equal(got, want) {
		t.Errorf("attempts undone %v, want %v", got, want)
	}
}
