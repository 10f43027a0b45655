package detector

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestReady: only a True Ready condition is ready; none, Unknown or False is not.
func TestReady(t *testing.T) {
	for name, tc := range map[string]struct {
		conds []corev1.NodeCondition
		want  bool
	}{
		"no conditions": {nil, false},
		"ready":         {[]corev1.NodeCondition{{Type: corev1.NodeMemoryPressure}, {Type: corev1.NodeReady, Status: corev1.ConditionTrue}}, true},
		"unknown":       {[]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}, false},
		"not ready":     {[]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Ready(&corev1.Node{Status: corev1.NodeStatus{Conditions: tc.conds}}); got != tc.want {
				t.Errorf("Ready = %t, want %t", got, tc.want)
			}
		})
	}
}
