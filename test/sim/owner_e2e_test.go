package sim

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/leader"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestIdentityLeaseGoesWithItsPod (an uninstall once left one identity Lease for every
// replica that ever ran): a replica started with its pod's name and UID (the
// chart's downward API) makes the pod own its identity Lease. The replica is SIGKILLed,
// so it cannot delete the Lease itself; once the pod is deleted, kube-controller-manager's
// garbage collector removes the Lease.
func TestIdentityLeaseGoesWithItsPod(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, nil)
	cs := h.Cluster.Client
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := cs.CoreV1().ServiceAccounts(ControllerNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The replica's pod, bound to a node no kubelet serves: only its object matters.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-controller-0"},
		Spec: corev1.PodSpec{NodeName: "elsewhere", Containers: []corev1.Container{{Name: "c", Image: "kubefence"}}}}
	pod, err := cs.CoreV1().Pods(ControllerNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.StartControllerWithEnv("controller", []string{"POD_NAMESPACE=" + ControllerNamespace,
		"POD_NAME=" + pod.Name, "POD_UID=" + string(pod.UID)})
	if err != nil {
		t.Fatal(err)
	}
	selector := leader.IdentityLabel + "=true," + leader.ComponentLabel + "=controller"
	var lease string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cs.CoordinationV1().Leases(ControllerNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		for _, l := range list.Items {
			for _, o := range l.OwnerReferences {
				if o.UID == pod.UID && o.Kind == "Pod" {
					lease = l.Name
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no identity Lease owned by pod %s", pod.Name)
	}
	if err := syscall.Kill(r.p.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-r.Done()
	zero := int64(0)
	if err := cs.CoreV1().Pods(ControllerNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoordinationV1().Leases(ControllerNamespace).Get(ctx, lease, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("identity Lease %s still there %s after its pod was deleted", lease, time.Since(deleted).Round(time.Second))
	}
	t.Logf("identity Lease %s removed by the garbage collector %s after its pod", lease, time.Since(deleted).Round(100*time.Millisecond))
}
