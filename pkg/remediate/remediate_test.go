package remediate

import (
	"context"
	"errors"
	"fmt"
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
	return &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "dead"},
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
			r := &Remediator{Client: c}
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
	fenced, oos := "checkpoint ["+FencedTaint.Key+"]", "checkpoint ["+FencedTaint.Key+" "+OutOfServiceTaint.Key+"]"
	tests := map[string]struct {
		strategy   v1alpha1.RemediationStrategy
		taints     []corev1.Taint
		want       []string
		wantTaints []string
	}{
		"both: NoSchedule taint, pods, attachments, then out-of-service": {
			strategy: v1alpha1.StrategyBoth,
			// Both taints recorded at the one checkpoint before the first change.
			want: []string{oos, "update nodes/ dead", "update pods/status web-0", "delete pods/ web-0",
				"delete volumeattachments/ va-dead", "update nodes/ dead"},
			wantTaints: []string{FencedTaint.Key, OutOfServiceTaint.Key},
		},
		"direct: no out-of-service taint": {
			strategy: v1alpha1.StrategyDirect,
			want: []string{fenced, "update nodes/ dead", "update pods/status web-0", "delete pods/ web-0",
				"delete volumeattachments/ va-dead"},
			wantTaints: []string{FencedTaint.Key},
		},
		"out-of-service only": {
			strategy:   v1alpha1.StrategyOutOfServiceTaint,
			want:       []string{"checkpoint [" + OutOfServiceTaint.Key + "]", "update nodes/ dead"},
			wantTaints: []string{OutOfServiceTaint.Key},
		},
		"a person's out-of-service taint is not claimed": {
			strategy:   v1alpha1.StrategyOutOfServiceTaint,
			taints:     []corev1.Taint{person},
			want:       []string{"checkpoint []"},
			wantTaints: nil,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := fake.NewSimpleClientset(objects(tc.taints)...) //nolint:staticcheck // field-managed fake not needed
			// One log of checkpoints (with the taints recorded at that moment) and writes,
			// in the order they happened.
			var log []string
			var rem v1alpha1.Remediation
			r := &Remediator{Client: c, Checkpoint: func(context.Context) error {
				log = append(log, fmt.Sprintf("checkpoint %v", rem.TaintsAdded))
				return nil
			}}
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
				t.Errorf("checkpoints and writes = %q, want %q", log, tc.want)
			}
			if !slices.Equal(rem.TaintsAdded, tc.wantTaints) {
				t.Errorf("recorded taints %v, want %v", rem.TaintsAdded, tc.wantTaints)
			}
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

// A checkpoint that fails stops Release before it changes anything, and the taint it
// would have recorded is not left in the record.
func TestReleaseStopsWhenCheckpointFails(t *testing.T) {
	c := fake.NewSimpleClientset(objects(nil)...) //nolint:staticcheck // field-managed fake not needed
	r := &Remediator{Client: c, Checkpoint: func(context.Context) error { return errors.New("lease lost") }}
	var rem v1alpha1.Remediation
	err := r.Release(context.Background(), incident(1, "boot-1"), v1alpha1.StrategyBoth, &rem)
	if err == nil || !strings.Contains(err.Error(), "lease lost") {
		t.Fatalf("Release error = %v, want the checkpoint's", err)
	}
	if m := mutations(c); len(m) != 0 {
		t.Errorf("Release changed the cluster after a failed checkpoint: %v", m)
	}
	if len(rem.TaintsAdded) != 0 {
		t.Errorf("taints recorded after a failed checkpoint: %v", rem.TaintsAdded)
	}
}
