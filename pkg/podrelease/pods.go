package podrelease

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/coalesce"
)

// deletePods marks each pod of the node with a DisruptionTarget condition and phase
// Failed, as PodGC does for out-of-service nodes, then deletes it with grace period 0. It
// returns the deleted pods whose StatefulSet recreates them under the same name.
func (r *Releaser) deletePods(ctx context.Context, nodeName string, rem *v1alpha1.Remediation) ([]*corev1.Pod, error) {
	pods, err := r.podsOn(ctx, nodeName)
	if err != nil {
		return nil, err
	}
	var reused []*corev1.Pod
	deleted := 0
	for _, pod := range releaseOrder(pods) {
		if pod.Spec.NodeName != nodeName {
			// Never trust the field selector alone with a force delete.
			continue
		}
		// A static pod's API mirror: deleting it does nothing useful.
		if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		if err := r.before(ctx, ActionDeletePod); err != nil {
			return nil, fmt.Errorf("delete pod %s/%s of node %s: %w", pod.Namespace, pod.Name, nodeName, err)
		}
		if err := r.markFailed(ctx, pod); err != nil {
			return nil, err
		}
		err := r.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("delete pod %s/%s of node %s: %w", pod.Namespace, pod.Name, nodeName, err)
		}
		if err == nil && reusesName(pod) {
			reused = append(reused, pod)
		}
		key := pod.Namespace + "/" + pod.Name
		if !slices.Contains(rem.PodsDeleted, key) {
			rem.PodsDeleted = append(rem.PodsDeleted, key)
		}
		deleted++
	}
	if deleted > 0 {
		r.step(v1alpha1.StepPodsDeleted, fmt.Sprintf("force-deleted %d pods", deleted))
	}
	return reused, nil
}

func (r *Releaser) markFailed(ctx context.Context, pod *corev1.Pod) error {
	return r.mark(ctx, pod, true)
}

// mark sets the pod's DisruptionTarget condition and phase Failed; retry reads a pod
// whose cached copy was stale and marks it once more.
func (r *Releaser) mark(ctx context.Context, pod *corev1.Pod, retry bool) error {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return nil
	}
	now := metav1.Now()
	status := pod.Status.DeepCopy()
	status.Phase = corev1.PodFailed
	cond := corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: ConditionReason,
		Message: "kubefence: the node was fenced (verified powered off or cut off from storage)", LastTransitionTime: now,
	}
	if i := slices.IndexFunc(status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.DisruptionTarget }); i >= 0 {
		status.Conditions[i] = cond
	} else {
		status.Conditions = append(status.Conditions, cond)
	}
	p := pod.DeepCopy()
	p.Status = *status
	_, err := r.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) && retry && r.Pods != nil {
		// The cached copy was stale: mark the pod as it is now, if it is still the same
		// pod on the same node, so that its owner (a Job's pod failure policy) reads why
		// it went.
		live, gerr := r.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if gerr == nil && live.UID == pod.UID && live.Spec.NodeName == pod.Spec.NodeName {
			return r.mark(ctx, live, false)
		}
		return nil
	}
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("mark pod %s/%s failed: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// SharedAttachments returns the list of VolumeAttachments that the releases running at
// once share (Releaser.Attachments).
func SharedAttachments(client kubernetes.Interface) *coalesce.Read[[]storagev1.VolumeAttachment] {
	return &coalesce.Read[[]storagev1.VolumeAttachment]{Timeout: attachmentsTimeout,
		Do: func(ctx context.Context) ([]storagev1.VolumeAttachment, error) {
			list, err := client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			return list.Items, nil
		}}
}

// attachmentsTimeout bounds one shared list of VolumeAttachments.
const attachmentsTimeout = 30 * time.Second

// volumeAttachments lists every VolumeAttachment: from the cache when the caller has
// one and the out-of-service taint follows (kube-controller-manager's attach-detach
// controller force-detaches what the cache missed from an out-of-service node), else
// with a read sent after the call (the API server cannot select them by node), shared
// with the releases asking at once.
func (r *Releaser) volumeAttachments(ctx context.Context, taintFollows bool) ([]*storagev1.VolumeAttachment, error) {
	if taintFollows && r.CachedAttachments != nil {
		return r.CachedAttachments(), nil
	}
	reads := r.Attachments
	if reads == nil {
		reads = SharedAttachments(r.Client)
	}
	res, err := reads.Get(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*storagev1.VolumeAttachment, len(res.Value))
	for i := range res.Value {
		out[i] = &res.Value[i]
	}
	return out, nil
}

// deleteVolumeAttachments deletes every VolumeAttachment of the node.
func (r *Releaser) deleteVolumeAttachments(ctx context.Context, nodeName string, rem *v1alpha1.Remediation, taintFollows bool) error {
	vas, err := r.volumeAttachments(ctx, taintFollows)
	if err != nil {
		return fmt.Errorf("list volume attachments of node %s: %w", nodeName, err)
	}
	deleted := 0
	for _, va := range vas {
		if va.Spec.NodeName != nodeName {
			continue
		}
		if err := r.before(ctx, ActionDeleteVolumeAttachment); err != nil {
			return fmt.Errorf("delete volume attachment %s of node %s: %w", va.Name, nodeName, err)
		}
		uid := types.UID(va.UID)
		err := r.Client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &uid},
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete volume attachment %s of node %s: %w", va.Name, nodeName, err)
		}
		if !slices.Contains(rem.VolumeAttachmentsDeleted, va.Name) {
			rem.VolumeAttachmentsDeleted = append(rem.VolumeAttachmentsDeleted, va.Name)
		}
		deleted++
	}
	if deleted > 0 {
		r.step(v1alpha1.StepVolumeAttachmentsDeleted, fmt.Sprintf("deleted %d volume attachments", deleted))
	}
	return nil
}
