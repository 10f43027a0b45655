package leader

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// LeaderCondition is the pod condition the leader sets True on its own pod. Listed in the
// Deployment's readinessGates, it makes only the leader ready, so that a Service selects
// the leader alone (as KubeEdge's CloudCore does).
const LeaderCondition corev1.PodConditionType = "kubefence.io/leader"

// PodRef names the pod this replica runs in (from the downward API).
type PodRef struct {
	Namespace, Name string
}

// SetLeaderCondition sets the leader condition of the pod to leader.
func SetLeaderCondition(ctx context.Context, client kubernetes.Interface, pod PodRef, leader bool) error {
	status, reason := corev1.ConditionFalse, "Standby"
	if leader {
		status, reason = corev1.ConditionTrue, "Leader"
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: LeaderCondition, Status: status, Reason: reason, LastTransitionTime: metav1.Now(),
	}}}})
	if err != nil {
		return fmt.Errorf("encode condition %s: %w", LeaderCondition, err)
	}
	// Conditions merge by type in a strategic merge patch: the kubelet's own stay.
	_, err = client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("set condition %s=%s on pod %s/%s: %w", LeaderCondition, status, pod.Namespace, pod.Name, err)
	}
	return nil
}
