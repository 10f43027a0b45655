package podrelease

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

func objects(nodeTaints []corev1.Taint) []runtime.Object {
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	mirror := pod("static", "dead")
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	pv := "pv-1"
	return []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dead"}, Spec: corev1.NodeSpec{Taints: nodeTaints},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-1"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "alive"}},
		pod("web-0", "dead"), pod("app-1", "alive"), mirror,
		&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-dead"},
			Spec: storagev1.VolumeAttachmentSpec{NodeName: "dead", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}}},
		&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-alive"},
			Spec: storagev1.VolumeAttachmentSpec{NodeName: "alive", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}}},
	}
}

func incident(verified int32, boot string) *v1alpha1.NodeFence {
	return &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "inc-1"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "dead"},
		Status: v1alpha1.NodeFenceStatus{VerifiedLevel: verified, BootID: boot}}
}

// mutations lists the writes the client saw, as "verb resource/subresource name".
func mutations(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		if w := describeWrite(a); w != "" {
			out = append(out, w)
		}
	}
	return out
}

// describeWrite returns "verb resource/subresource name" for a write, "" for a read.
func describeWrite(a k8stesting.Action) string {
	switch a.GetVerb() {
	case "get", "list", "watch":
		return ""
	}
	name := ""
	switch act := a.(type) {
	case k8stesting.DeleteAction:
		name = act.GetName()
	case k8stesting.UpdateAction:
		name = act.GetObject().(metav1.Object).GetName()
	}
	return a.GetVerb() + " " + a.GetResource().Resource + "/" + a.GetSubresource() + " " + name
}

func TestReleaseRefusesWithoutVerifiedFence(t *testing.T) {
	tests := map[string]struct {
		nf   *v1alpha1.NodeFence
		want error
	}{
		"not verified":               {incident(0, "boot-1"), ErrNotVerified},
		"node booted again meantime": {incident(1, "boot-0"), ErrNodeRebooted},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := fake.NewSimpleClientset(objects(nil)...) //nolint:staticcheck // field-managed fake not needed
			r := &Releaser{Client: c}
			var rem v1alpha1.Remediation
			err := r.Release(context.Background(), tc.nf, v1alpha1.StrategyBoth, &rem)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Release error = %v, want %v", err, tc.want)
			}
			if m := mutations(c); len(m) != 0 {
				t.Errorf("Release changed the cluster before refusing: %v", m)
			}
		})
	}
}

func TestReleaseStrategies(t *testing.T) {
	person := corev1.Taint{Key: OutOfServiceTaint.Key, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}
	tests := map[string]struct {
		strategy   v1alpha1.RemediationStrategy
		taints     []corev1.Taint
		want       []string
		wantTaints []string
		// wantMark is the node's owner mark at the end.
		wantMark string
	}{
		"both: NoSchedule taint, pods, attachments, then out-of-service": {
			strategy: v1alpha1.StrategyBoth,
			// No write of the incident before the first change: each taint's update
			// carries its owner.
			want: []string{"update nodes/ dead", "update pods/status web-0", "delete pods/ web-0",
				"delete volumeattachments/ va-dead", "update nodes/ dead"},
			wantTaints: []string{FencedTaint.Key, OutOfServiceTaint.Key},
			wantMark:   "inc-1=" + FencedTaint.Key + "," + OutOfServiceTaint.Key,
		},
		"direct: no out-of-service taint": {
			strategy: v1alpha1.StrategyDirect,
			want: []string{"update nodes/ dead", "update pods/status web-0", "delete pods/ web-0",
				"delete volumeattachments/ va-dead"},
			wantTaints: []string{FencedTaint.Key},
			wantMark:   "inc-1=" + FencedTaint.Key,
		},
		"out-of-service only": {
			strategy:   v1alpha1.StrategyOutOfServiceTaint,
			want:       []string{"update nodes/ dead"},
			wantTaints: []string{OutOfServiceTaint.Key},
			wantMark:   "inc-1=" + OutOfServiceTaint.Key,
		},
		"a person's out-of-service taint is not claimed": {
			strategy:   v1alpha1.StrategyOutOfServiceTaint,
			taints:     []corev1.Taint{person},
			want:       nil,
			wantTaints: nil,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := fake.NewSimpleClientset(objects(tc.taints)...) //nolint:staticcheck // field-managed fake not needed
			// The writes, in the order they happened.
			var log []string
			var rem v1alpha1.Remediation
			r := &Releaser{Client: c}
			c.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if w := describeWrite(a); w != "" {
					log = append(log, w)
				}
				return false, nil, nil
			})
			if err := r.Release(context.Background(), incident(1, "boot-1"), tc.strategy, &rem); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(log, tc.want) {
				t.Errorf("writes = %q, want %q", log, tc.want)
			}
			expectOwnership(t, c, &rem, tc.wantTaints, tc.wantMark)
			// Idempotent: a second run finds nothing left to do.
			c.ClearActions()
			if err := r.Release(context.Background(), incident(1, "boot-1"), tc.strategy, &rem); err != nil {
				t.Fatal(err)
			}
			if got := mutations(c); len(got) != 0 {
				t.Errorf("second release wrote %q", got)
			}
		})
	}
}

// expectOwnership checks the taints rem records and the dead node's owner mark, and
// returns the node.
func expectOwnership(t *testing.T, c *fake.Clientset, rem *v1alpha1.Remediation, taints []string, mark string) *corev1.Node {
	t.Helper()
	if !slices.Equal(rem.TaintsAdded, taints) {
		t.Errorf("recorded taints %v, want %v", rem.TaintsAdded, taints)
	}
	node, err := c.CoreV1().Nodes().Get(context.Background(), "dead", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := node.Annotations[OwnerAnnotation]; got != mark {
		t.Errorf("owner mark %q, want %q", got, mark)
	}
	return node
}

// A Lease check that fails stops Release before it changes anything, and records no
// taint.
func TestReleaseStopsWhenLeaseCheckFails(t *testing.T) {
	c := fake.NewSimpleClientset(objects(nil)...) //nolint:staticcheck // field-managed fake not needed
	r := &Releaser{Client: c, Before: func(context.Context, string) error { return errors.New("lease lost") }}
	var rem v1alpha1.Remediation
	err := r.Release(context.Background(), incident(1, "boot-1"), v1alpha1.StrategyBoth, &rem)
	if err == nil || !strings.Contains(err.Error(), "lease lost") {
		t.Fatalf("Release error = %v, want the Lease check's", err)
	}
	if m := mutations(c); len(m) != 0 {
		t.Errorf("Release changed the cluster after a failed Lease check: %v", m)
	}
	if len(rem.TaintsAdded) != 0 {
		t.Errorf("taints recorded after a failed Lease check: %v", rem.TaintsAdded)
	}
}

// TestReleaseResumesFromTheOwnerMark: the replica that added the fenced taint lost its
// record of it (it crashed right after the update). The release that resumes finds the
// taint marked as this incident's on the node and records it, without adding it again,
// so that recovery removes it; the same taint marked for another incident is not taken.
func TestReleaseResumesFromTheOwnerMark(t *testing.T) {
	for name, tc := range map[string]struct {
		mark       string
		wantTaints []string
		wantMark   string
	}{
		"marked for this incident": {"inc-1=" + FencedTaint.Key, []string{FencedTaint.Key, OutOfServiceTaint.Key},
			"inc-1=" + FencedTaint.Key + "," + OutOfServiceTaint.Key},
		"marked for another incident": {"inc-0=" + FencedTaint.Key, []string{OutOfServiceTaint.Key},
			"inc-1=" + OutOfServiceTaint.Key},
		"not marked": {"", []string{OutOfServiceTaint.Key}, "inc-1=" + OutOfServiceTaint.Key},
	} {
		t.Run(name, func(t *testing.T) {
			objs := objects([]corev1.Taint{FencedTaint})
			if tc.mark != "" {
				objs[0].(*corev1.Node).Annotations = map[string]string{OwnerAnnotation: tc.mark}
			}
			c := fake.NewSimpleClientset(objs...) //nolint:staticcheck // field-managed fake not needed
			r := &Releaser{Client: c}
			var rem v1alpha1.Remediation
			if err := r.Release(context.Background(), incident(1, "boot-1"), v1alpha1.StrategyBoth, &rem); err != nil {
				t.Fatal(err)
			}
			node := expectOwnership(t, c, &rem, tc.wantTaints, tc.wantMark)
			if n := len(node.Spec.Taints); n != 2 {
				t.Errorf("node has %d taints, want the fenced one once and the out-of-service one: %v", n, node.Spec.Taints)
			}
		})
	}
}

// TestRemoveTaintsByTheOwnerMark: recovery removes the taints the node's owner mark gives
// the incident even when its record lost them, and the mark with them; a person's taint
// and another incident's mark stay.
func TestRemoveTaintsByTheOwnerMark(t *testing.T) {
	person := corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule}
	for name, tc := range map[string]struct {
		mark        string
		wantTaints  int
		wantMark    string
		wantRemoved []string
	}{
		"this incident's":    {"inc-1=" + FencedTaint.Key + "," + OutOfServiceTaint.Key, 1, "", []string{FencedTaint.Key, OutOfServiceTaint.Key}},
		"another incident's": {"inc-0=" + FencedTaint.Key, 3, "inc-0=" + FencedTaint.Key, nil},
	} {
		t.Run(name, func(t *testing.T) {
			objs := objects([]corev1.Taint{FencedTaint, OutOfServiceTaint, person})
			objs[0].(*corev1.Node).Annotations = map[string]string{OwnerAnnotation: tc.mark}
			c := fake.NewSimpleClientset(objs...) //nolint:staticcheck // field-managed fake not needed
			r := &Releaser{Client: c}
			var rem v1alpha1.Remediation
			removed, err := r.RemoveTaints(context.Background(), "inc-1", "dead", &rem)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(removed, tc.wantRemoved) {
				t.Errorf("removed %v, want %v", removed, tc.wantRemoved)
			}
			node, err := c.CoreV1().Nodes().Get(context.Background(), "dead", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(node.Spec.Taints) != tc.wantTaints {
				t.Errorf("taints left %v, want %d", node.Spec.Taints, tc.wantTaints)
			}
			if got := node.Annotations[OwnerAnnotation]; got != tc.wantMark {
				t.Errorf("owner mark %q, want %q", got, tc.wantMark)
			}
		})
	}
}
