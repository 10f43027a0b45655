package podrelease

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/detector"
)

// MarkUnreachable sets or clears cond, the NodeUnreachable condition of an unreachable
// node's pods (detector.PodCondition), on pods, so that users and tools see why they are
// stuck. check confirms this replica still leads before the first patch; when it does
// not, nothing is patched, and the next sync marks the pods again. A patch merges by
// condition type: the kubelet's own conditions stay. A pod being deleted, or whose
// condition is already cond, is left alone.
func MarkUnreachable(ctx context.Context, client kubernetes.Interface, pods []*corev1.Pod, cond corev1.PodCondition, check func(context.Context) error) {
	checked := false
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if _, changed := detector.SetPodCondition(pod.Status.Conditions, cond); !changed {
			continue
		}
		if !checked {
			if check(ctx) != nil {
				return
			}
			checked = true
		}
		patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
		if err != nil {
			return // a PodCondition always encodes
		}
		_, err = client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{}, "status")
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Marking pod of unreachable node", "pod", klog.KObj(pod), "err", err)
		}
	}
}
