package podrelease

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// evictionRace is the dead node's StatefulSet pod web-0 in a fake API server, with
// kube-controller-manager's shared pod cache lagging behind it. The StatefulSet controller
// recreates web-0 on the healthy node once that cache has dropped the deleted pod. The
// taint eviction, when the out-of-service taint lands, queues the pods the cache lists on
// the node; its worker, which runs later, gets each by name and deletes it, with no UID
// (taint_eviction.go, addConditionAndDeletePod). The cache catches up when time passes:
// at every read of a pod, and before the eviction's worker runs.
func evictionRace(t *testing.T) *fake.Clientset {
	t.Helper()
	c := fake.NewSimpleClientset(objects(nil)...) //nolint:staticcheck // field-managed fake not needed
	tracker := c.Tracker()
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	o, err := tracker.Get(gvr, "default", "web-0")
	if err != nil {
		t.Fatal(err)
	}
	web := o.(*corev1.Pod).DeepCopy()
	web.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "uid-web", Controller: ptr.To(true)}}
	if err := tracker.Update(gvr, web, "default"); err != nil {
		t.Fatal(err)
	}
	cached := map[string]bool{"web-0": true} // on node dead, as kube-controller-manager's cache has it
	var unseen []string                      // deletions the cache has not seen yet
	catchUp := func() {
		for _, name := range unseen {
			delete(cached, name)
			if name == "web-0" { // the StatefulSet controller
				if err := tracker.Create(gvr, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0", UID: "uid-web-0-replacement"},
					Spec: corev1.PodSpec{NodeName: "alive"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}, "default"); err != nil {
					t.Errorf("recreate web-0: %v", err)
				}
			}
		}
		unseen = nil
	}
	c.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		catchUp()
		return false, nil, nil
	})
	c.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		o, err := tracker.Get(gvr, d.Namespace, d.Name)
		if err != nil {
			return true, nil, err
		}
		if pre := d.DeleteOptions.Preconditions; pre != nil && pre.UID != nil && *pre.UID != o.(*corev1.Pod).UID {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), d.Name, nil)
		}
		if g := d.DeleteOptions.GracePeriodSeconds; g == nil || *g > 0 {
			// A graceful deletion: the pod's kubelet is gone, so it stays, marked.
			p := o.(*corev1.Pod).DeepCopy()
			p.DeletionTimestamp = ptr.To(metav1.Now())
			return true, nil, tracker.Update(gvr, p, d.Namespace)
		}
		unseen = append(unseen, d.Name)
		return true, nil, tracker.Delete(gvr, d.Namespace, d.Name)
	})
	evicted := false
	c.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n := a.(k8stesting.UpdateAction).GetObject().(*corev1.Node)
		if n.Name != "dead" || !hasTaint(n, OutOfServiceTaint) || evicted {
			return false, nil, nil
		}
		evicted = true
		var queued []string
		for name := range cached {
			queued = append(queued, name)
		}
		catchUp() // the eviction's worker runs later
		for _, name := range queued {
			if err := c.Tracker().Delete(gvr, "default", name); err == nil { // by name: whatever pod has it now
				t.Logf("the taint eviction deleted the pod named %s", name)
			}
		}
		return false, nil, nil
	})
	return c
}

// TestReleaseLeavesTheReplacementAlone: the out-of-service taint goes on only once the
// StatefulSet has recreated the pods the release deleted, so that kube-controller-
// manager's taint eviction, which deletes by name from a cache that can lag, finds the
// dead node's pods gone and never meets their replacements on a healthy node (real
// nodes, before: the eviction deleted a replacement).
func TestReleaseLeavesTheReplacementAlone(t *testing.T) {
	ctx := context.Background()
	c := evictionRace(t)
	r := &Releaser{Client: c, ReplacementWait: DefaultReplacementWait}
	var rem v1alpha1.Remediation
	if err := r.Release(ctx, incident(1, "boot-1"), v1alpha1.StrategyBoth, &rem); err != nil {
		t.Fatal(err)
	}
	p, err := c.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{})
	if err != nil || p.UID != "uid-web-0-replacement" {
		t.Fatalf("web-0: %v (%v); want its replacement on node alive, untouched", p.GetUID(), err)
	}
	if !slices.Contains(rem.PodsDeleted, "default/web-0") || !slices.Contains(rem.TaintsAdded, OutOfServiceTaint.Key) {
		t.Errorf("pods deleted %q, taints %q; want web-0 and the out-of-service taint", rem.PodsDeleted, rem.TaintsAdded)
	}
}

// TestReusesName: only a StatefulSet's pods come back under their name.
func TestReusesName(t *testing.T) {
	owned := func(apiVersion, kind string, controller bool) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: apiVersion, Kind: kind, Name: "o", UID: types.UID("u"), Controller: ptr.To(controller)}}}}
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"a StatefulSet's":                 {owned("apps/v1", "StatefulSet", true), true},
		"a ReplicaSet's":                  {owned("apps/v1", "ReplicaSet", true), false},
		"a StatefulSet's, not controller": {owned("apps/v1", "StatefulSet", false), false},
		"another API group's StatefulSet": {owned("apps.kruise.io/v1beta1", "StatefulSet", true), false},
		"a bare pod":                      {&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, false},
	} {
		if got := reusesName(tc.pod); got != tc.want {
			t.Errorf("%s: reusesName = %v, want %v", name, got, tc.want)
		}
	}
}

// TestReleaseRetryLeavesTheReplacementAlone: a release that failed after deleting the
// pods (here its VolumeAttachment deletion is refused once) and is tried again at once
// finds no pod left on the node; it still waits for the StatefulSet's replacement of the
// pod the first attempt deleted before the out-of-service taint goes on. A retry after
// ReplacementWait has passed does not wait again (the model's cache, which catches up
// only when read, then still lists web-0: a real one has caught up long before).
func TestReleaseRetryLeavesTheReplacementAlone(t *testing.T) {
	for name, tc := range map[string]struct {
		retryAfter time.Duration
		waits      bool
	}{
		"tried again at once":              {0, true},
		"tried again after the whole wait": {DefaultReplacementWait, false},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := evictionRace(t)
			now := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
			nf := incident(1, "boot-1")
			refuse := true
			r := &Releaser{Client: c, ReplacementWait: DefaultReplacementWait, Now: func() time.Time { return now },
				OnStep: func(step, msg string) {
					nf.Status.Timeline = append(nf.Status.Timeline, v1alpha1.Step{Time: metav1.NewMicroTime(now), Type: step, Message: msg})
				},
				Before: func(_ context.Context, action string) error {
					if action == ActionDeleteVolumeAttachment && refuse {
						refuse = false
						return errors.New("refused")
					}
					return nil
				}}
			var rem v1alpha1.Remediation
			if err := r.Release(ctx, nf, v1alpha1.StrategyBoth, &rem); err == nil {
				t.Fatal("the first attempt passed its refused VolumeAttachment deletion")
			}
			if !slices.Contains(rem.PodsDeleted, "default/web-0") || slices.Contains(rem.TaintsAdded, OutOfServiceTaint.Key) {
				t.Fatalf("after the first attempt: pods deleted %q, taints %q; want web-0 deleted and no out-of-service taint", rem.PodsDeleted, rem.TaintsAdded)
			}
			now = now.Add(tc.retryAfter)
			if err := r.Release(ctx, nf, v1alpha1.StrategyBoth, &rem); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(rem.TaintsAdded, OutOfServiceTaint.Key) {
				t.Errorf("taints %q; want the out-of-service taint", rem.TaintsAdded)
			}
			gets := 0
			for _, a := range c.Actions() {
				if a.GetVerb() == "get" && a.GetResource().Resource == "pods" {
					gets++
				}
			}
			p, err := c.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{})
			if tc.waits && (err != nil || p.UID != "uid-web-0-replacement") {
				t.Fatalf("web-0: %v (%v); want its replacement on node alive, untouched", p.GetUID(), err)
			}
			if !tc.waits && gets != 0 {
				t.Errorf("the retry read web-0 %d times; want no wait %s after the deletion", gets, tc.retryAfter)
			}
		})
	}
}

// TestReplacementsLate: a StatefulSet pod whose replacement does not come within the wait
// (its StatefulSet scaled down, its controller behind) delays the out-of-service taint by
// the wait and no more, and the incident's timeline names it.
func TestReplacementsLate(t *testing.T) {
	ctx := context.Background()
	c := fake.NewSimpleClientset(objects(nil)...) //nolint:staticcheck // field-managed fake not needed
	web, err := c.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "uid-web", Controller: ptr.To(true)}}
	if _, err := c.CoreV1().Pods("default").Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var steps []v1alpha1.Step
	r := &Releaser{Client: c, ReplacementWait: 100 * time.Millisecond,
		OnStep: func(step, msg string) { steps = append(steps, v1alpha1.Step{Type: step, Message: msg}) }}
	var rem v1alpha1.Remediation
	if err := r.Release(ctx, incident(1, "boot-1"), v1alpha1.StrategyBoth, &rem); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rem.TaintsAdded, OutOfServiceTaint.Key) {
		t.Errorf("taints %q; want the out-of-service taint after the wait", rem.TaintsAdded)
	}
	i := slices.IndexFunc(steps, func(s v1alpha1.Step) bool { return s.Type == v1alpha1.StepReplacementsLate })
	if i < 0 || !strings.Contains(steps[i].Message, "default/web-0") {
		t.Fatalf("steps %+v; want a ReplacementsLate step naming default/web-0", steps)
	}
	if last := steps[len(steps)-1]; last.Type != v1alpha1.StepTaintAdded || !strings.Contains(last.Message, OutOfServiceTaint.Key) || i != len(steps)-2 {
		t.Errorf("steps %+v; want ReplacementsLate right before the out-of-service taint", steps)
	}
}

// TestReleaseOrder: a release deletes first the pods a replacement waits on (a
// StatefulSet's, one with a claim), the DaemonSets' last, and otherwise keeps the order
// it was given; every pod is deleted.
func TestReleaseOrder(t *testing.T) {
	pod := func(name, kind string, claim bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{NodeName: "dead"}}
		if kind != "" {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "o", UID: "u", Controller: ptr.To(true)}}
		}
		if claim {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		}
		return p
	}
	given := []*corev1.Pod{pod("agent", "DaemonSet", false), pod("web", "ReplicaSet", false), pod("db-0", "StatefulSet", false),
		pod("bare", "", false), pod("job", "ReplicaSet", true), pod("csi", "DaemonSet", false)}
	var names []string
	for _, p := range releaseOrder(given) {
		names = append(names, p.Name)
	}
	if want := []string{"db-0", "job", "web", "bare", "agent", "csi"}; !slices.Equal(names, want) {
		t.Errorf("order %q, want %q", names, want)
	}
	if given[0].Name != "agent" {
		t.Errorf("the given slice was reordered: %s first", given[0].Name)
	}

	var objs []runtime.Object
	for _, p := range given {
		objs = append(objs, p)
	}
	objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dead"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-1"}}})
	c := fake.NewSimpleClientset(objs...) //nolint:staticcheck // field-managed fake not needed
	var rem v1alpha1.Remediation
	if err := (&Releaser{Client: c}).Release(context.Background(), incident(1, "boot-1"), v1alpha1.StrategyDirect, &rem); err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, a := range c.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && a.GetResource().Resource == "pods" {
			deleted = append(deleted, d.GetName())
		}
	}
	// The fake lists pods in its own order: only the groups are fixed.
	group := func(names []string) []string { s := slices.Clone(names); slices.Sort(s); return s }
	if len(deleted) != 6 || !slices.Equal(group(deleted[:2]), []string{"db-0", "job"}) || !slices.Equal(group(deleted[4:]), []string{"agent", "csi"}) {
		t.Errorf("deleted %q; want db-0 and job first, agent and csi last, all six", deleted)
	}
}

// TestReleaseWaitsOnlyForNamesThatComeBack: a first release whose pods are none of a
// StatefulSet's (a DaemonSet's, a ReplicaSet's) adds the out-of-service taint without
// waiting: their names never come back, and its own deletions are not an earlier
// attempt's.
func TestReleaseWaitsOnlyForNamesThatComeBack(t *testing.T) {
	ctx := context.Background()
	owned := func(name, kind string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "o", UID: "u", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: "dead"}}
	}
	c := fake.NewSimpleClientset(owned("agent-x1", "DaemonSet"), owned("web-7d9f-x2", "ReplicaSet"), //nolint:staticcheck // field-managed fake not needed
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dead"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-1"}}})
	nf := incident(1, "boot-1")
	now := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	r := &Releaser{Client: c, ReplacementWait: 5 * time.Second, Now: func() time.Time { return now },
		OnStep: func(step, msg string) {
			nf.Status.Timeline = append(nf.Status.Timeline, v1alpha1.Step{Time: metav1.NewMicroTime(now), Type: step, Message: msg})
		}}
	var rem v1alpha1.Remediation
	if err := r.Release(ctx, nf, v1alpha1.StrategyBoth, &rem); err != nil {
		t.Fatal(err)
	}
	if len(rem.PodsDeleted) != 2 || !slices.Contains(rem.TaintsAdded, OutOfServiceTaint.Key) {
		t.Fatalf("pods deleted %q, taints %q; want both pods and the out-of-service taint", rem.PodsDeleted, rem.TaintsAdded)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "pods" {
			t.Errorf("the release read pod %s: it waited for a name that does not come back", a.(k8stesting.GetAction).GetName())
		}
	}
	for _, s := range nf.Status.Timeline {
		if s.Type == v1alpha1.StepReplacementsLate {
			t.Errorf("step %s: %s", s.Type, s.Message)
		}
	}
}
