package podrelease

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/detector"
)

// TestMarkUnreachable: the pods whose condition changes are patched, after one leader
// check; a pod being deleted or already marked is not; a refused check patches nothing.
func TestMarkUnreachable(t *testing.T) {
	now := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	cond := corev1.PodCondition{Type: detector.PodConditionNodeUnreachable, Status: corev1.ConditionTrue,
		Reason: "LeaseExpired", Message: "node dead unreachable", LastTransitionTime: metav1.NewTime(now)}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{NodeName: "dead"}}
	}
	marked, deleting, fresh := pod("marked"), pod("deleting"), pod("fresh")
	marked.Status.Conditions = []corev1.PodCondition{cond}
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	for name, tc := range map[string]struct {
		refuse  error
		patched []string
		checks  int
	}{
		// "gone" is not found: logged, and the pods after it are still patched.
		"leading":     {nil, []string{"fresh", "gone"}, 1},
		"not leading": {errors.New("deposed"), nil, 1},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset(marked, deleting, fresh)
			checks := 0
			check := func(context.Context) error { checks++; return tc.refuse }
			MarkUnreachable(context.Background(), client, []*corev1.Pod{marked, deleting, fresh, pod("gone")}, cond, check)
			var patched []string
			for _, a := range client.Actions() {
				if p, ok := a.(k8stesting.PatchAction); ok && p.GetSubresource() == "status" {
					patched = append(patched, p.GetName())
				}
			}
			if !slices.Equal(patched, tc.patched) {
				t.Errorf("patched %v, want %v", patched, tc.patched)
			}
			if checks != tc.checks {
				t.Errorf("%d leader checks, want %d", checks, tc.checks)
			}
		})
	}
}
