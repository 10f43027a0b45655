package podrelease

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// staleCache is a node cache that missed the node's last change: the API server holds
// the node at resourceVersion "2" (changed by change), the cache the copy at "1". The
// client refuses an update that carries a resourceVersion other than the stored one, as
// the API server does.
func staleCache(t *testing.T, change func(*corev1.Node)) (*fake.Clientset, *Releaser) {
	t.Helper()
	c := fake.NewSimpleClientset(objects(nil)...) //nolint:staticcheck // field-managed fake not needed
	nodes := c.CoreV1().Nodes()
	cached, err := nodes.Get(context.Background(), "dead", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cached.ResourceVersion = "1"
	live := cached.DeepCopy()
	live.ResourceVersion = "2"
	change(live)
	if _, err := nodes.Update(context.Background(), live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n := a.(k8stesting.UpdateAction).GetObject().(*corev1.Node)
		stored, err := c.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", n.Name)
		if err != nil {
			return true, nil, err
		}
		if rv := stored.(*corev1.Node).ResourceVersion; n.ResourceVersion != rv {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, n.Name, errors.New("stale resourceVersion"))
		}
		n = n.DeepCopy()
		n.ResourceVersion += "+"
		return true, n, c.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, n, "")
	})
	c.ClearActions()
	r := &Releaser{Client: c, Node: func(name string) (*corev1.Node, bool) { return cached.DeepCopy(), name == "dead" }}
	return c, r
}

// TestReleaseFromStaleCacheRebooted: the node booted again, and the cache has not seen
// it. The release starts from the cached copy, whose boot matches the incident; the first
// taint's update is refused on its resourceVersion, the node read again shows the new
// boot, and nothing is released (two copies of a pod otherwise).
func TestReleaseFromStaleCacheRebooted(t *testing.T) {
	c, r := staleCache(t, func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" })
	var rem v1alpha1.Remediation
	err := r.Release(context.Background(), incident(1, "boot-1"), v1alpha1.StrategyBoth, &rem)
	if !errors.Is(err, ErrNodeRebooted) {
		t.Fatalf("release: %v, want ErrNodeRebooted", err)
	}
	// One write: the refused update from the stale copy.
	if w := mutations(c); !slices.Equal(w, []string{"update nodes/ dead"}) || len(rem.TaintsAdded) != 0 {
		t.Errorf("writes %q, taints recorded %v; want only the refused update, nothing recorded", w, rem.TaintsAdded)
	}
	if n, _ := c.CoreV1().Nodes().Get(context.Background(), "dead", metav1.GetOptions{}); len(n.Spec.Taints) != 0 {
		t.Errorf("taints %v on a node that booted again", n.Spec.Taints)
	}
}

// TestReleaseFromCacheWithTaintReadsLive: a cached copy that already carries the first
// taint (an earlier try added it) leads to no update that would catch a stale copy, so
// the node is read live, and its new boot stops the release.
func TestReleaseFromCacheWithTaintReadsLive(t *testing.T) {
	c, r := staleCache(t, func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" })
	cachedWithTaint := r.Node
	r.Node = func(name string) (*corev1.Node, bool) {
		n, ok := cachedWithTaint(name)
		n.Spec.Taints = []corev1.Taint{FencedTaint}
		return n, ok
	}
	rem := v1alpha1.Remediation{TaintsAdded: []string{FencedTaint.Key}}
	err := r.Release(context.Background(), incident(1, "boot-1"), v1alpha1.StrategyBoth, &rem)
	if !errors.Is(err, ErrNodeRebooted) {
		t.Fatalf("release: %v, want ErrNodeRebooted", err)
	}
	if w := mutations(c); len(w) != 0 {
		t.Errorf("writes %q after a reboot", w)
	}
}

// TestReleaseLeavesTaintFoundOnNode: a person put the out-of-service taint on the node
// after the cache last saw it. The release meant to add it from the cached copy; the
// node read after the conflict has it, with no owner mark naming the incident, so the
// record does not take it and recovery leaves it alone.
func TestReleaseLeavesTaintFoundOnNode(t *testing.T) {
	person := corev1.Taint{Key: OutOfServiceTaint.Key, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}
	c, r := staleCache(t, func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{person} })
	var rem v1alpha1.Remediation
	if err := r.Release(context.Background(), incident(1, "boot-1"), v1alpha1.StrategyBoth, &rem); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rem.TaintsAdded, []string{FencedTaint.Key}) {
		t.Errorf("recorded taints %v, want only %s: the out-of-service taint is the person's", rem.TaintsAdded, FencedTaint.Key)
	}
	n, _ := c.CoreV1().Nodes().Get(context.Background(), "dead", metav1.GetOptions{})
	if len(n.Spec.Taints) != 2 {
		t.Errorf("taints %v, want the person's and the fenced taint", n.Spec.Taints)
	}
}

// TestStalePodMarkedLive: a pod from a stale cache has its status update refused on its
// resourceVersion; the pod read live, still the same pod on the fenced node, gets its
// DisruptionTarget condition, so that its owner (a Job's pod failure policy) reads why
// it went.
func TestStalePodMarkedLive(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "job-0", UID: "u1", ResourceVersion: "2"},
		Spec: corev1.PodSpec{NodeName: "dead"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	c := fake.NewSimpleClientset(pod) //nolint:staticcheck // field-managed fake not needed
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	c.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.UpdateAction).GetObject().(*corev1.Pod)
		stored, err := c.Tracker().Get(pods, p.Namespace, p.Name)
		if err != nil {
			return true, nil, err
		}
		if rv := stored.(*corev1.Pod).ResourceVersion; p.ResourceVersion != rv {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, p.Name, errors.New("stale resourceVersion"))
		}
		return true, p, c.Tracker().Update(pods, p, p.Namespace)
	})
	stale := pod.DeepCopy()
	stale.ResourceVersion = "1"
	r := &Releaser{Client: c, Pods: func(string) []*corev1.Pod { return []*corev1.Pod{stale} }}
	if err := r.markFailed(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	got, err := c.CoreV1().Pods("default").Get(context.Background(), "job-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodFailed || !slices.ContainsFunc(got.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.DisruptionTarget && c.Reason == ConditionReason
	}) {
		t.Errorf("pod status %+v, want Failed with kubefence's DisruptionTarget condition", got.Status)
	}
}
