package sim

import (
	"context"
	"crypto/sha256"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// CSIDriver is the driver name of the simulated volumes. No CSI plugin runs: the simulated
// kubelets play both the attach-detach controller and the external attacher for it, which
// is why nodes do not carry the controller-managed-attach-detach annotation.
const CSIDriver = "sim.csi.kubefence.io"

const (
	reasonWaitVolume   = "WaitingForVolume"
	reasonFailedAttach = "FailedAttachVolume"
)

// AttachmentName is the VolumeAttachment name for a CSI volume on a node, computed as the
// real CSI attacher does (sha256 of volume handle, driver and node).
func AttachmentName(volumeHandle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(volumeHandle+driver+node)))
}

// attachVolumes makes sure every CSI volume of pod is attached to this node. It returns a
// reason and message instead of attaching when a volume is not bound yet or, for a
// read-write-once volume, while an attachment to another node exists: that is the
// Multi-Attach rule that keeps a StatefulSet pod from starting twice.
func (n *Node) attachVolumes(ctx context.Context, pod *corev1.Pod) (reason, msg string, err error) {
	pvcs := n.c.informers.Core().V1().PersistentVolumeClaims().Lister()
	pvs := n.c.informers.Core().V1().PersistentVolumes().Lister()
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim == nil {
			continue
		}
		claim := vol.PersistentVolumeClaim.ClaimName
		pvc, err := pvcs.PersistentVolumeClaims(pod.Namespace).Get(claim)
		if err != nil || pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
			return reasonWaitVolume, fmt.Sprintf("waiting for PersistentVolumeClaim %s to be bound", claim), nil
		}
		pv, err := pvs.Get(pvc.Spec.VolumeName)
		if err != nil {
			return reasonWaitVolume, fmt.Sprintf("waiting for PersistentVolume %s", pvc.Spec.VolumeName), nil
		}
		if pv.Spec.CSI == nil {
			continue
		}
		if other := n.attachedElsewhere(pv.Name); other != "" && exclusive(pv) {
			return reasonFailedAttach, fmt.Sprintf(
				"Multi-Attach error: volume %s is attached to node %s", pv.Name, other), nil
		}
		if err := n.ensureAttached(ctx, pv); err != nil {
			return "", "", err
		}
	}
	return "", "", nil
}

// attachedElsewhere names a node other than this one with an attachment of pv, or "".
func (n *Node) attachedElsewhere(pv string) string {
	vas, err := n.c.informers.Storage().V1().VolumeAttachments().Lister().List(labels.Everything())
	if err != nil {
		return ""
	}
	for _, va := range vas {
		src := va.Spec.Source.PersistentVolumeName
		if src != nil && *src == pv && va.Spec.NodeName != n.Name() {
			return va.Spec.NodeName
		}
	}
	return ""
}

func exclusive(pv *corev1.PersistentVolume) bool {
	for _, m := range pv.Spec.AccessModes {
		if m == corev1.ReadWriteMany || m == corev1.ReadOnlyMany {
			return false
		}
	}
	return true
}

// ensureAttached creates the VolumeAttachment of pv on this node and reports it attached
// through the status subresource, as an external attacher would.
func (n *Node) ensureAttached(ctx context.Context, pv *corev1.PersistentVolume) error {
	api := n.c.Client.StorageV1().VolumeAttachments()
	name := AttachmentName(pv.Spec.CSI.VolumeHandle, pv.Spec.CSI.Driver, n.Name())
	va, err := n.c.informers.Storage().V1().VolumeAttachments().Lister().Get(name)
	if apierrors.IsNotFound(err) {
		pvName := pv.Name
		va, err = api.Create(ctx, &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: pv.Spec.CSI.Driver, NodeName: n.Name(),
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			va, err = api.Get(ctx, name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("attach %s: %w", pv.Name, err)
	}
	if va.Status.Attached {
		return nil
	}
	va = va.DeepCopy()
	va.Status.Attached = true
	if _, err := api.UpdateStatus(ctx, va, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("mark %s attached: %w", pv.Name, err)
	}
	n.c.logf("sim: node %s: volume %s attached (%s)", n.Name(), pv.Name, name)
	return nil
}

// detachUnused deletes this node's attachments of the simulated driver that no live pod on
// the node uses any more, as the attach-detach controller does after a pod is gone.
func (n *Node) detachUnused(ctx context.Context, pods []*corev1.Pod) {
	pvcs := n.c.informers.Core().V1().PersistentVolumeClaims().Lister()
	used := map[string]bool{}
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded ||
			pod.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, vol := range pod.Spec.Volumes {
			if vol.PersistentVolumeClaim == nil {
				continue
			}
			pvc, err := pvcs.PersistentVolumeClaims(pod.Namespace).Get(vol.PersistentVolumeClaim.ClaimName)
			if err == nil && pvc.Spec.VolumeName != "" {
				used[pvc.Spec.VolumeName] = true
			}
		}
	}
	vas, err := n.c.informers.Storage().V1().VolumeAttachments().Lister().List(labels.Everything())
	if err != nil {
		return
	}
	for _, va := range vas {
		src := va.Spec.Source.PersistentVolumeName
		if va.Spec.NodeName != n.Name() || va.Spec.Attacher != CSIDriver || src == nil ||
			used[*src] || va.DeletionTimestamp != nil {
			continue
		}
		n.detach(ctx, va)
	}
}

func (n *Node) detach(ctx context.Context, va *storagev1.VolumeAttachment) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	uid := va.UID
	err := n.c.Client.StorageV1().VolumeAttachments().Delete(ctx, va.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil:
		n.c.logf("sim: node %s: volume %s detached", n.Name(), *va.Spec.Source.PersistentVolumeName)
	case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
		n.c.logf("sim: node %s: detach %s: %v", n.Name(), va.Name, err)
	}
}
