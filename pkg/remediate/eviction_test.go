package remediate

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// evictionRace is the dead node's StatefulSet pod web-0 in a fake API server with two of
// kube-controller-manager's controllers as they act on it. The taint eviction, when the
// out-of-service taint lands, gets web-0 by name as its lagging cache still lists it on
// the node and deletes it gracefully, by name, with no UID (taint_eviction.go,
// addConditionAndDeletePod). The StatefulSet controller recreates web-0 on the healthy
// node the moment it is gone. A graceful deletion leaves a pod whose kubelet is gone in
// place, marked.
func evictionRace(t *testing.T) *fake.Clientset {
	t.Helper()
	c := fake.NewSimpleClientset(objects(nil)...) //nolint:staticcheck // field-managed fake not needed
	tracker := c.Tracker()
	pods := corev1.SchemeGroupVersion.WithResource("pods")
	del := func(name string, force bool, uid *types.UID) error {
		o, err := tracker.Get(pods, "default", name)
		if err != nil {
			return err
		}
		p := o.(*corev1.Pod).DeepCopy()
		if uid != nil && p.UID != *uid {
			return apierrors.NewConflict(pods.GroupResource(), name, nil)
		}
		if !force {
			if p.DeletionTimestamp == nil {
				now := metav1.Now()
				p.DeletionTimestamp = &now
			}
			return tracker.Update(pods, p, "default")
		}
		if err := tracker.Delete(pods, "default", name); err != nil {
			return err
		}
		if name != "web-0" {
			return nil
		}
		return tracker.Create(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0", UID: "uid-web-0-replacement"},
			Spec: corev1.PodSpec{NodeName: "alive"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}, "default")
	}
	c.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		force := d.DeleteOptions.GracePeriodSeconds != nil && *d.DeleteOptions.GracePeriodSeconds == 0
		var uid *types.UID
		if d.DeleteOptions.Preconditions != nil {
			uid = d.DeleteOptions.Preconditions.UID
		}
		return true, nil, del(d.Name, force, uid)
	})
	evicted := false
	c.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n := a.(k8stesting.UpdateAction).GetObject().(*corev1.Node)
		if n.Name == "dead" && hasTaint(n, OutOfServiceTaint) && !evicted {
			evicted = true
			if err := del("web-0", false, nil); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("taint eviction of web-0: %v", err)
			}
		}
		return false, nil, nil
	})
	return c
}

// TestReleaseLeavesTheReplacementAlone: with the out-of-service taint, the release leaves
// the pods that the taint eviction deletes by name to it before it force-deletes them, so
// that the eviction, which looks pods up by name, meets the dead node's pod and not its
// StatefulSet replacement on a healthy node (real nodes, with the taint added last: the
// eviction deleted the replacement).
func TestReleaseLeavesTheReplacementAlone(t *testing.T) {
	ctx := context.Background()
	c := evictionRace(t)
	r := &Remediator{Client: c, EvictionWait: time.Minute}
	var rem v1alpha1.Remediation
	if err := r.Release(ctx, incident(1, "boot-1"), v1alpha1.StrategyBoth, &rem); err != nil {
		t.Fatal(err)
	}
	p, err := c.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("web-0: %v, want its replacement on node alive", err)
	}
	if p.UID != "uid-web-0-replacement" || p.DeletionTimestamp != nil {
		t.Errorf("web-0 is %s on %s, deleted at %v; want the replacement, not deleted", p.UID, p.Spec.NodeName, p.DeletionTimestamp)
	}
	if !slices.Contains(rem.PodsDeleted, "default/web-0") {
		t.Errorf("pods deleted %q, want default/web-0", rem.PodsDeleted)
	}
}

// TestAwaitedPods: the release waits for the taint eviction only on the pods that it
// evicts and whose names come back.
func TestAwaitedPods(t *testing.T) {
	pod := func(name string, f func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{NodeName: "dead"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if f != nil {
			f(p)
		}
		return p
	}
	now := metav1.Now()
	pods := []*corev1.Pod{
		pod("web-0", nil),
		pod("db-0", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
		}),
		pod("app-7d9f-x2x", func(p *corev1.Pod) { p.GenerateName = "app-7d9f-" }),
		pod("agent", func(p *corev1.Pod) { p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}} }),
		pod("oos", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: OutOfServiceTaint.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
		}),
		pod("going", func(p *corev1.Pod) { p.DeletionTimestamp = &now }),
		pod("done", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("static", func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }),
		pod("elsewhere", func(p *corev1.Pod) { p.Spec.NodeName = "alive" }),
	}
	if got, want := awaited(pods, "dead"), []string{"default/web-0", "default/db-0"}; !slices.Equal(got, want) {
		t.Errorf("awaited = %q, want %q", got, want)
	}
}
