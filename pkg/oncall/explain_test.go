package oncall

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	"github.com/kubefence/kubefence/pkg/nodeview"
)

// explainCluster is three nodes, two of them silent for a minute, node-2's incident held
// by the storm rule, as the leader recorded it.
func explainCluster(now time.Time, pause bool) Explainer {
	var objs []runtime.Object
	for i, silent := range []bool{false, true, true} {
		name := []string{"node-1", "node-2", "node-3"}[i]
		renew := now.Add(-time.Second)
		ready := corev1.ConditionTrue
		if silent {
			renew, ready = now.Add(-time.Minute), corev1.ConditionUnknown
		}
		objs = append(objs,
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(renew)}}}},
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-node-lease"},
				Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(renew)), LeaseDurationSeconds: ptr.To[int32](40)}})
	}
	if pause {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-pause", Namespace: "kubefence",
			Labels: map[string]string{v1alpha1.PauseLabel: "true"}}, Data: map[string]string{"patch-night": "alice: rack 3"}})
	}
	held := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-2-x", CreationTimestamp: metav1.NewTime(now.Add(-30 * time.Second))},
		Spec: v1alpha1.NodeFenceSpec{NodeName: "node-2", RequestedBy: v1alpha1.RequestedByController},
		Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseHeld, Policy: "default",
			Message: "2 of 3 nodes governed by policy default unhealthy (max 1)",
			Timeline: []v1alpha1.Step{{Type: v1alpha1.StepDetected, Time: metav1.NewMicroTime(now.Add(-30 * time.Second)),
				Message: "unhealthy for longer than the threshold: lease last renewed at ..."}}}}
	cfg := &v1alpha1.Config{LeaderElection: v1alpha1.LeaderElection{Namespace: "kubefence"},
		Policies: []v1alpha1.Policy{{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{"ipmi"}}}}}}
	cfg.Default()
	return Explainer{PauseConfigMap: DefaultPauseConfigMap, Config: cfg, Kube: kubefake.NewClientset(objs...), Fencing: fencingfake.NewSimpleClientset(held), Now: func() time.Time { return now }}
}

// TestExplainHeldNode: explain names the evidence, the threshold, the incident the
// leader recorded, the rule that holds it now and what would let it go on.
func TestExplainHeldNode(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		pause bool
		want  []string
	}{
		"storm": {false, []string{"node node-2, policy default", "evidence:  lease last renewed at", "threshold: Lease silent",
			"incident:  node-2-x, phase Held", "rule now:  Hold UnhealthyBudgetExceeded", "next:      held by UnhealthyBudgetExceeded; an on-call person may set fencing.kubefence.io/force=true"}},
		"paused": {true, []string{"paused:    patch-night: alice: rack 3", "rule now:  Hold Paused: fencing is paused cluster-wide: patch-night: alice: rack 3",
			"it goes on once every pause request is removed"}},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := explainCluster(now, tc.pause).Explain(context.Background(), "node-2", &out); err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + out.String())
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("explain printed no %q:\n%s", w, out.String())
				}
			}
		})
	}
	var out bytes.Buffer
	if err := explainCluster(now, false).Explain(context.Background(), "node-1", &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "next:      nothing: the evidence does not say the node is dead") {
		t.Errorf("explain of a healthy node:\n%s", out.String())
	}
	if err := explainCluster(now, false).Explain(context.Background(), "node-9", &out); err == nil || !strings.Contains(err.Error(), "node-9") {
		t.Errorf("explain of a node that does not exist: %v", err)
	}
}

// TestExplainConfirmOff: explain says what a confirm-off on a failed incident would do
// now by the rule the leader answers one with (Decide): refused while the node's agent
// reported within its Lease's stated duration or a replica renews on the node, taken once
// nothing it can read shows the node alive.
func TestExplainConfirmOff(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	report := func(renewed time.Time) runtime.Object {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-node-node-3", Namespace: "kubefence",
			Labels: map[string]string{v1alpha1.NodeLabel: "node-3", "app.kubernetes.io/component": "node-agent"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-3"), RenewTime: ptr.To(metav1.NewMicroTime(renewed)), LeaseDurationSeconds: ptr.To[int32](30)}}
	}
	replica := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-controller-abc", Namespace: "kubefence",
		Labels: map[string]string{v1alpha1.NodeLabel: "node-3", "fencing.kubefence.io/identity": "true", "fencing.kubefence.io/component": "controller"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("host_1_x"), RenewTime: ptr.To(metav1.NewMicroTime(now.Add(-2 * time.Second)))}}
	for name, tc := range map[string]struct {
		objs []runtime.Object
		want string
	}{
		"agent reports":      {[]runtime.Object{report(now.Add(-3 * time.Second))}, "confirm:   a confirm-off now would be refused: node node-3 is alive: its node agent reported 3s ago (a report counts for 30s)"},
		"replica renews":     {[]runtime.Object{replica}, "confirm:   a confirm-off now would be refused: node node-3 is alive: a controller replica runs on it: replica host_1_x"},
		"agent's report old": {[]runtime.Object{report(now.Add(-time.Minute))}, "confirm:   a confirm-off now would release the node"},
		"nothing shows life": {nil, "confirm:   a confirm-off now would release the node"},
	} {
		t.Run(name, func(t *testing.T) {
			e := explainCluster(now, false)
			failed := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-3-x", CreationTimestamp: metav1.NewTime(now.Add(-time.Minute))},
				Spec:   v1alpha1.NodeFenceSpec{NodeName: "node-3", RequestedBy: v1alpha1.RequestedByController},
				Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFailed, Policy: "default", Message: "every level failed: BMC unreachable"}}
			if err := e.Fencing.(*fencingfake.Clientset).Tracker().Add(failed); err != nil {
				t.Fatal(err)
			}
			for _, o := range tc.objs {
				if err := e.Kube.(*kubefake.Clientset).Tracker().Add(o); err != nil {
					t.Fatal(err)
				}
			}
			var out bytes.Buffer
			if err := e.Explain(context.Background(), "node-3", &out); err != nil {
				t.Fatal(err)
			}
			t.Log("\n" + out.String())
			for _, w := range []string{tc.want, "unless a sign of the node's life refuses it (confirm: above)"} {
				if !strings.Contains(out.String(), w) {
					t.Errorf("explain printed no %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// TestExplainAnswersFromTheLoopsView: with the loop's own sources (Live), explain answers
// from what the loop saw, not from what it reads: node-2's Lease, renewed a minute ago by
// the kubelet's clock, was seen renewed a second ago by the loop's detector (the loop
// counts from when it saw a renewal), so the loop's view is healthy where a one-shot read
// is not.
func TestExplainAnswersFromTheLoopsView(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	e := explainCluster(now, false)
	ctx := context.Background()
	var oneShot bytes.Buffer
	if err := e.Explain(ctx, "node-2", &oneShot); err != nil {
		t.Fatal(err)
	}
	cl, err := e.read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	replicas, err := e.replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live := e.sources(cl, replicas)
	live.Detector = detector.ForConfig(e.Config)
	for _, l := range cl.leases {
		live.Detector.ObserveLease(l, now.Add(-time.Second))
	}
	e.Live = func() nodeview.Sources { return live }
	var answered bytes.Buffer
	if err := e.Explain(ctx, "node-2", &answered); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(oneShot.String(), "(Unhealthy)") || strings.Contains(answered.String(), "(Unhealthy)") {
		t.Fatalf("one-shot explain:\n%s\nthe loop's view:\n%s\nwant node-2 unhealthy only in the one-shot read", oneShot.String(), answered.String())
	}
}
