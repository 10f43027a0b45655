package oncall

import (
	"context"
	"errors"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// reviewing is a fake API server whose authorizer allows the users in allowed, and
// records the reviews it was asked.
func reviewing(t *testing.T, allowed ...string) (*kubefake.Clientset, *[]authorizationv1.SubjectAccessReviewSpec) {
	t.Helper()
	kube := kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}})
	var asked []authorizationv1.SubjectAccessReviewSpec
	kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		asked = append(asked, sar.Spec)
		for _, u := range allowed {
			if sar.Spec.User == u {
				sar.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "RBAC: allowed by ClusterRoleBinding oncall"}
				return true, sar, nil
			}
		}
		return true, sar, nil
	})
	return kube, &asked
}

// TestAskPermission: the controller asks the API server the question the chart's
// admission policy asks, of the author the policy recorded, and refuses a word with no
// author, an author who may not give it, and a word it may not ask about.
func TestAskPermission(t *testing.T) {
	ctx := context.Background()
	kube, asked := reviewing(t, "alice")
	nf := incident(v1alpha1.PhaseFailed, confirmWord)
	w, _ := Pending(nf)
	if denied, err := AskPermission(ctx, kube, w); err != nil || denied != "" {
		t.Fatalf("alice, allowed: %q, %v", denied, err)
	}
	want := authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: &authorizationv1.ResourceAttributes{
		Group: v1alpha1.GroupName, Resource: "nodefences", Subresource: v1alpha1.SubresourceConfirm, Verb: "create"}}
	if len(*asked) != 1 || (*asked)[0].User != want.User || *(*asked)[0].ResourceAttributes != *want.ResourceAttributes {
		t.Errorf("asked %+v, want %+v", *asked, want)
	}
	cancel, _ := Pending(incident(v1alpha1.PhaseHeld, cancelWord))
	if denied, _ := AskPermission(ctx, kube, cancel); !strings.Contains(denied, "bob may not create nodefences/cancel: no rule allows it") {
		t.Errorf("bob, not allowed: %q", denied)
	}
	if denied, _ := AskPermission(ctx, kube, Word{Kind: ConfirmOff, Reason: "off"}); !strings.Contains(denied, "names no author (fencing.kubefence.io/confirm-off-by") || len(*asked) != 2 {
		t.Errorf("no author: %q after %d reviews; want refused without asking", denied, len(*asked))
	}
	kube.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "", errors.New("no"))
	})
	if denied, err := AskPermission(ctx, kube, w); err != nil || !strings.Contains(denied, "the controller may not ask whether alice may create nodefences/confirm") {
		t.Errorf("review forbidden: %q, %v", denied, err)
	}
	kube.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if _, err := AskPermission(ctx, kube, w); err == nil {
		t.Error("a failed review was taken as an answer")
	}
}

// TestRead: the reads for a cancel ask the API server whether the node is gone, as the
// cache may be behind a person who just deleted it.
func TestRead(t *testing.T) {
	ctx := context.Background()
	kube, _ := reviewing(t, "bob")
	cancel, _ := Pending(incident(v1alpha1.PhaseHeld, cancelWord))
	for node, gone := range map[string]bool{"node-2": false, "node-9": true} {
		f, err := Read(ctx, kube, cancel, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, Facts{})
		if err != nil || !f.Read || f.NodeGone != gone || f.Denied != "" {
			t.Errorf("%s: facts %+v, %v; want read, gone %v, allowed", node, f, err, gone)
		}
	}
}
