package maintenance

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

func TestSignal(t *testing.T) {
	cordoned := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	tests := map[string]struct {
		node    func(*corev1.Node)
		rule    v1alpha1.CordonRule
		drained bool
		objects Objects
		want    string // substring; "" means no signal
	}{
		"nothing":                          {rule: v1alpha1.CordonWhenDrained, drained: true},
		"cordoned and drained":             {node: cordoned, rule: v1alpha1.CordonWhenDrained, drained: true, want: "cordoned (spec.unschedulable) and drained"},
		"cordoned with workloads left":     {node: cordoned, rule: v1alpha1.CordonWhenDrained},
		"cordoned, rule Always":            {node: cordoned, rule: v1alpha1.CordonAlways, want: "cordoned (spec.unschedulable)"},
		"cordoned and drained, rule Never": {node: cordoned, rule: v1alpha1.CordonNever, drained: true},
		"the autoscaler's taint": {rule: v1alpha1.CordonNever, want: AutoscalerTaint,
			node: func(n *corev1.Node) {
				n.Spec.Taints = []corev1.Taint{{Key: AutoscalerTaint, Value: "1700000000", Effect: corev1.TaintEffectNoSchedule}}
			}},
		"Karpenter's disruption taint": {rule: v1alpha1.CordonNever, want: KarpenterTaint,
			node: func(n *corev1.Node) {
				n.Spec.Taints = []corev1.Taint{{Key: KarpenterTaint, Effect: corev1.TaintEffectNoSchedule}}
			}},
		"the Node being deleted": {rule: v1alpha1.CordonNever, want: "the Node is being deleted (since 2026-11-27T03:00:00Z)",
			node: func(n *corev1.Node) {
				n.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)}
			}},
		"another taint": {rule: v1alpha1.CordonNever,
			node: func(n *corev1.Node) {
				n.Spec.Taints = []corev1.Taint{{Key: "example.com/x", Effect: corev1.TaintEffectNoSchedule}}
			}},
		"medik8s' exclude label": {rule: v1alpha1.CordonNever, want: ExcludeLabel,
			node: func(n *corev1.Node) { n.Labels = map[string]string{ExcludeLabel: ""} }},
		"kured rebooting it, not yet cordoned": {rule: v1alpha1.CordonNever, want: KuredRebootAnnotation,
			node: func(n *corev1.Node) {
				n.Annotations = map[string]string{KuredRebootAnnotation: "2026-11-27T03:00:00Z"}
			}},
		"kured's other annotation": {rule: v1alpha1.CordonNever,
			node: func(n *corev1.Node) {
				n.Annotations = map[string]string{"weave.works/kured-most-recent-reboot-needed": "2026-11-27T03:00:00Z"}
			}},
		"a deleting Machine":  {rule: v1alpha1.CordonNever, objects: Objects{DeletingMachine: "ns/m-1"}, want: "Cluster API Machine ns/m-1 is being deleted"},
		"a NodeMaintenance":   {rule: v1alpha1.CordonNever, objects: Objects{NodeMaintenance: "nm-1"}, want: "NodeMaintenance nm-1"},
		"the object is named": {node: cordoned, rule: v1alpha1.CordonAlways, objects: Objects{NodeMaintenance: "nm-2"}, want: "NodeMaintenance nm-2"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
			if tc.node != nil {
				tc.node(n)
			}
			got := Signal(n, tc.rule, tc.drained, tc.objects)
			if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Errorf("Signal = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEarlier(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	for _, tc := range []struct{ a, b, want time.Time }{
		{t0, t1, t0}, {t1, t0, t0}, {time.Time{}, t1, t1}, {t1, time.Time{}, t1}, {time.Time{}, time.Time{}, time.Time{}},
	} {
		if got := Earlier(tc.a, tc.b); !got.Equal(tc.want) {
			t.Errorf("Earlier(%s, %s) = %s, want %s", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestHolds(t *testing.T) {
	for by, want := range map[string]bool{
		v1alpha1.RequestedByController:                     true,
		v1alpha1.RequestedByRemediationPrefix + "capi/m-1": true,
		"alice@example.com":                                false,
		"system:serviceaccount:ops:drill":                  false,
	} {
		nf := &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{RequestedBy: by}}
		if got := Holds(nf); got != want {
			t.Errorf("Holds(requestedBy %q) = %t, want %t", by, got, want)
		}
	}
}
