package sim

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// register creates the Node object and, if the node is powered on, its first heartbeat.
func (n *Node) register(ctx context.Context) error {
	// The kubelet labels its node with its host's name, which a label value holds (63
	// characters); a longer node name (an FQDN a cloud provider gives, say) comes with
	// the host's short name.
	hostname := n.Name()
	if len(hostname) > 63 {
		hostname, _, _ = strings.Cut(hostname, ".")
	}
	labels := map[string]string{
		"kubernetes.io/hostname": hostname,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
	}
	for k, v := range n.spec.Labels {
		labels[k] = v
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: n.Name(), Labels: labels, Annotations: n.spec.Annotations,
	}}
	created, err := n.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("register node %s: %w", n.Name(), err)
	}
	n.mu.Lock()
	n.uid = created.UID
	n.mu.Unlock()
	if alive, _ := n.observePower(); !alive {
		return nil
	}
	if err := n.updateStatus(ctx); err != nil {
		return fmt.Errorf("register node %s: %w", n.Name(), err)
	}
	if err := n.renewLease(ctx); err != nil {
		return fmt.Errorf("register node %s: %w", n.Name(), err)
	}
	return nil
}

// leaseDuration is the leaseDurationSeconds a kubelet renewing every interval writes: the
// kubelet renews every quarter of its nodeLeaseDurationSeconds (40s by default, so 10s).
func leaseDuration(interval time.Duration) int32 {
	return int32(max((4*interval+time.Second-1)/time.Second, 1))
}

// renewLease creates or renews the node Lease, owned by the Node as the kubelet does it.
func (n *Node) renewLease(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	leases := n.client.CoordinationV1().Leases(NodeLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	holder, duration := n.Name(), leaseDuration(n.c.opts.LeaseRenewInterval)
	l, err := leases.Get(ctx, n.Name(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n.mu.Lock()
		owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: n.Name(), UID: n.uid}
		n.mu.Unlock()
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name(), Namespace: NodeLeaseNamespace,
				OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder,
				LeaseDurationSeconds: &duration, RenewTime: &now},
		}
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create lease: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get lease: %w", err)
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &duration, &now
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update lease: %w", err)
	}
	return nil
}

// updateStatus posts Ready=True with a fresh heartbeat, capacity, addresses and bootID.
func (n *Node) updateStatus(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	nodes := n.client.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := nodes.Get(ctx, n.Name(), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get node: %w", err)
		}
		n.applyStatus(&node.Status, metav1.Now())
		if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update node status: %w", err)
		}
		return nil
	})
}

func (n *Node) applyStatus(s *corev1.NodeStatus, now metav1.Time) {
	res := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("4"),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("50Gi"),
	}
	s.Capacity, s.Allocatable = res, res.DeepCopy()
	// The kubelet's port is on loopback; the node's own address (its pods' host IP) is
	// no address here, and a probe of it would only time out.
	s.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
		{Type: corev1.NodeHostName, Address: n.Name()},
	}
	if ip := n.spec.ExternalIP; ip != "" {
		s.Addresses = append(s.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: ip})
	}
	sum := sha256.Sum256([]byte(n.Name()))
	s.NodeInfo = corev1.NodeSystemInfo{
		BootID: n.BootID(), MachineID: hex.EncodeToString(sum[:16]),
		SystemUUID: cmp.Or(n.spec.SystemUUID, hex.EncodeToString(sum[16:])), KernelVersion: "6.1.0-sim",
		OSImage: "kubefence simulated node", ContainerRuntimeVersion: "sim://1.0",
		KubeletVersion: KubeVersion, OperatingSystem: "linux", Architecture: "amd64",
	}
	s.DaemonEndpoints.KubeletEndpoint.Port = n.kubelet.port()
	s.Conditions = setNodeCondition(s.Conditions, corev1.NodeReady, corev1.ConditionTrue,
		"KubeletReady", "kubelet is posting ready status", now)
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure,
		corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		s.Conditions = setNodeCondition(s.Conditions, t, corev1.ConditionFalse,
			"KubeletHasSufficientResources", "simulated", now)
	}
}

// setNodeCondition refreshes the heartbeat and moves the transition time only on change,
// as the kubelet does; the node lifecycle controller relies on both.
func setNodeCondition(conds []corev1.NodeCondition, t corev1.NodeConditionType,
	status corev1.ConditionStatus, reason, msg string, now metav1.Time) []corev1.NodeCondition {
	for i := range conds {
		if conds[i].Type != t {
			continue
		}
		if conds[i].Status != status {
			conds[i].LastTransitionTime = now
		}
		conds[i].Status, conds[i].Reason, conds[i].Message = status, reason, msg
		conds[i].LastHeartbeatTime = now
		return conds
	}
	return append(conds, corev1.NodeCondition{Type: t, Status: status, Reason: reason,
		Message: msg, LastHeartbeatTime: now, LastTransitionTime: now})
}

// WaitLeaseRenewals waits until node's Lease has been renewed twice more, so that a
// controller watching it has measured its renewal cadence: until then a leader's evidence
// floor is the Lease's whole duration (docs/safety-model.md §10), which would measure a
// fresh leader, not the steady state.
func WaitLeaseRenewals(ctx context.Context, client kubernetes.Interface, node string) error {
	var last *metav1.MicroTime
	changes := 0
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases(NodeLeaseNamespace).Get(ctx, node, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return false, nil
		}
		if last != nil && !l.Spec.RenewTime.Equal(last) {
			changes++
		}
		last = l.Spec.RenewTime
		return changes >= 2, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for two renewals of %s's Lease: %w", node, err)
	}
	return nil
}
