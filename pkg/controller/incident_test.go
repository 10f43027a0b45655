package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/fencecall"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	"github.com/kubefence/kubefence/pkg/policy"
)

// remediatedIncident is an incident whose node was verified fenced at verified, on boot
// "boot-1", with its Ready node.
func remediatedIncident(verified time.Time) (*v1alpha1.NodeFence, *corev1.Node) {
	fin := metav1.NewMicroTime(verified)
	nf := &v1alpha1.NodeFence{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "NodeFence"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1-x", ResourceVersion: "1"},
		Spec:       v1alpha1.NodeFenceSpec{NodeName: "node-1"},
		Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseRemediated, BootID: "boot-1", VerifiedLevel: 1,
			Attempts: []v1alpha1.Attempt{{Level: 1, Agent: "ipmi", Try: 1, State: v1alpha1.AttemptVerified, Finished: &fin}}},
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-1"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	return nf, node
}

func testController(t *testing.T, nf *v1alpha1.NodeFence, objs ...runtime.Object) *Controller {
	t.Helper()
	cfg := &v1alpha1.Config{}
	cfg.Default()
	return fixtureController(t, cfg, nil, nf, objs...)
}

// fixtureController is a controller on fake clients holding nf, with cfg and agents.
func fixtureController(t *testing.T, cfg *v1alpha1.Config, agents fencecall.Source, nf *v1alpha1.NodeFence, objs ...runtime.Object) *Controller {
	t.Helper()
	return newLoop(t, loopParts{cfg: cfg, kube: fake.NewClientset(objs...), fencing: fencingfake.NewSimpleClientset(nf), agents: agents,
		recorder: record.NewFakeRecorder(10)})
}

// stored reads an incident back from the (fake) API server.
func stored(t *testing.T, c *Controller, name string) *v1alpha1.NodeFence {
	t.Helper()
	nf, err := c.store.Client().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return nf
}

// TestSameBootNeedsASeenRenewal: a Ready node on its fenced boot contradicts the fence
// only once this replica saw its Lease renewed and its status posted after the fence
// held. A new leader sees a
// dead node Healthy for a while (its Lease clocks restart) and Ready until
// kube-controller-manager notices; that alone must not raise FenceContradicted.
func TestSameBootNeedsASeenRenewal(t *testing.T) {
	verified := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		renewal, status time.Time
		contradict      bool
	}{
		"no renewal seen (takeover)":    {time.Time{}, time.Time{}, false},
		"last renewal before the fence": {verified.Add(-time.Second), verified.Add(-time.Second), false},
		// Issue 19: a rebooted kubelet renews its Lease before it posts the status with
		// its new boot ID; the Node still shows the old one for a moment.
		"renewal after the fence, status only before it": {verified.Add(3 * time.Second), verified.Add(-time.Second), false},
		"renewal and status seen after the fence held":   {verified.Add(3 * time.Second), verified.Add(4 * time.Second), true},
	} {
		t.Run(name, func(t *testing.T) {
			nf, node := remediatedIncident(verified)
			c := fixtureController(t, fixtureConfig(), nil, nf)
			obs := detector.Observation{Node: "node-1", Health: detector.Healthy, BootID: "boot-1", Kubelet: detector.KubeletSeen{RenewalSeen: tc.renewal, StatusSeen: tc.status}}
			if _, err := c.drive(context.Background(), nf, node, policy.Node{}, obs); err != nil {
				t.Fatalf("drive: %v", err)
			}
			got := stored(t, c, nf.Name)
			if is := meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionContradiction); is != tc.contradict {
				t.Errorf("FenceContradicted stored = %v, want %v (conditions %+v)", is, tc.contradict, got.Status.Conditions)
			}
			if got.Status.Phase != v1alpha1.PhaseRemediated {
				t.Errorf("phase %s, want Remediated kept", got.Status.Phase)
			}
		})
	}
}

// TestLateReleaseConfirmsPodsLive: a pod the cache still shows on the fenced node after
// the API server deleted it (the cache lags the release that deleted it) sets nothing
// off; one the API server still has bound there does, and goes on to the agents' read-back
// (here refused: no agent is configured, so nothing is released).
func TestLateReleaseConfirmsPodsLive(t *testing.T) {
	verified := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0", UID: "u2"},
		Spec: corev1.PodSpec{NodeName: "node-1"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	for name, tc := range map[string]struct {
		inAPI []runtime.Object
		step  string
	}{
		"deleted, still cached": {nil, ""},
		"bound in the API":      {[]runtime.Object{pod}, v1alpha1.StepLateReleaseRefused},
	} {
		t.Run(name, func(t *testing.T) {
			nf, node := remediatedIncident(verified)
			c := testController(t, nf, tc.inAPI...)
			if err := c.caches.pods.GetIndexer().Add(pod); err != nil {
				t.Fatal(err)
			}
			pol := &v1alpha1.Policy{Name: "p", Remediation: v1alpha1.StrategyBoth}
			if _, err := c.releaseLate(context.Background(), nf, node, pol); err != nil {
				t.Fatalf("releaseLate: %v", err)
			}
			last := ""
			if tl := nf.Status.Timeline; len(tl) > 0 {
				last = tl[len(tl)-1].Type
			}
			if last != tc.step {
				t.Errorf("last step %q, want %q (timeline %+v)", last, tc.step, nf.Status.Timeline)
			}
		})
	}
}

// TestContradictionClearedByReboot: a FenceContradicted raised earlier is lowered, with a
// reason, once the node reports a new boot ID: a Recovered incident must not carry it.
func TestContradictionClearedByReboot(t *testing.T) {
	verified := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	nf, node := remediatedIncident(verified)
	meta.SetStatusCondition(&nf.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionContradiction, Status: metav1.ConditionTrue,
		Reason: conditionReasonSameBoot, Message: "earlier"})
	node.Status.NodeInfo.BootID = "boot-2"
	c := testController(t, nf)
	obs := detector.Observation{Node: "node-1", Health: detector.Healthy, BootID: "boot-2"}
	// No agent is configured, so the unfence fails after the condition changed; the
	// failure is recorded with it.
	_, _ = c.recover(context.Background(), nf, node, obs)
	got := stored(t, c, nf.Name)
	cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionContradiction)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != conditionReasonRebooted {
		t.Errorf("FenceContradicted = %+v, want False/RebootedAfterAll", cond)
	}
}

// TestVerdictStepTypes: a decision that does not fence is recorded as a step named after
// its verdict (decide); those names must be the API's step types.
func TestVerdictStepTypes(t *testing.T) {
	if string(policy.Wait) != v1alpha1.StepWait || string(policy.Hold) != v1alpha1.StepHold {
		t.Errorf("verdicts %s and %s, step types %s and %s", policy.Wait, policy.Hold, v1alpha1.StepWait, v1alpha1.StepHold)
	}
}

// TestLogsNameNodeAndIncident: what a sync logs carries the node and the
// incident as keys, and every timeline step is logged with them.
func TestLogsNameNodeAndIncident(t *testing.T) {
	verified := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	nf, node := remediatedIncident(verified)
	nf.Status.Policy = "p"
	cfg := &v1alpha1.Config{Policies: []v1alpha1.Policy{{Name: "p"}}}
	cfg.Default()
	c := fixtureController(t, cfg, nil, nf)
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := withLogValues(klog.NewContext(context.Background(), logger), "node", node.Name)
	obs := detector.Observation{Node: "node-1", Health: detector.Healthy, BootID: "boot-1",
		Kubelet: detector.KubeletSeen{RenewalSeen: verified.Add(3 * time.Second), StatusSeen: verified.Add(4 * time.Second)}}
	if _, err := c.drive(ctx, nf, node, policy.Node{}, obs); err != nil {
		t.Fatalf("drive: %v", err)
	}
	var steps, contradicted int
	for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		kv := map[string]any{}
		for i := 0; i+1 < len(e.WithKVList); i += 2 {
			kv[fmt.Sprint(e.WithKVList[i])] = e.WithKVList[i+1]
		}
		for i := 0; i+1 < len(e.ParameterKVList); i += 2 {
			kv[fmt.Sprint(e.ParameterKVList[i])] = e.ParameterKVList[i+1]
		}
		if kv["node"] != "node-1" || kv["incident"] != nf.Name {
			t.Errorf("log entry %q has node %v and incident %v, want node-1 and %s", e.Message, kv["node"], kv["incident"], nf.Name)
		}
		switch e.Message {
		case "Incident step":
			if kv["step"] == v1alpha1.StepContradiction {
				steps++
			}
		case "Fence contradicted":
			contradicted++
		}
	}
	if steps != 1 || contradicted != 1 {
		t.Errorf("logged %d Contradiction steps and %d contradictions, want 1 and 1", steps, contradicted)
	}
}

// TestEnterRefusesIllegalMove: the one place that moves a phase refuses a move the
// machine does not have (fencer.CanMove), and then changes nothing: an ended incident
// never fences again, and nothing unverified is released.
func TestEnterRefusesIllegalMove(t *testing.T) {
	for _, tc := range []struct{ from, to v1alpha1.Phase }{
		{v1alpha1.PhaseFailed, v1alpha1.PhaseFencing},
		{v1alpha1.PhaseFencing, v1alpha1.PhaseRemediated},
		{v1alpha1.PhaseRecovered, v1alpha1.PhaseRecovered},
		{v1alpha1.PhasePending, v1alpha1.PhaseFenced},
		{v1alpha1.PhaseHeld, v1alpha1.PhaseRemediated},
	} {
		nf, node := remediatedIncident(time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC))
		nf.Status.Phase = tc.from
		if tc.to == v1alpha1.PhaseFenced {
			// Pending → Fenced is a person's confirm-off, and only once it is on record.
			nf.Status.VerifiedLevel, nf.Status.ConfirmedOff = 0, nil
		}
		c := testController(t, nf)
		err := c.enter(context.Background(), nf, node, transition{to: tc.to, count: true, step: v1alpha1.StepRemediated,
			event: note{corev1.EventTypeNormal, v1alpha1.ReasonRemediated, "x"}})
		if err == nil || nf.Status.Phase != tc.from || len(nf.Status.Timeline) != 0 {
			t.Errorf("%s → %s: err %v, phase %s, %d steps; want refused and nothing changed", tc.from, tc.to, err, nf.Status.Phase, len(nf.Status.Timeline))
		}
	}
}
