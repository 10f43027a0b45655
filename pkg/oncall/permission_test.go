package oncall

import (
	"context"
	"errors"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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

// wordPolicy is the chart's admission policy of word, named name, failing as fail.
func wordPolicy(name string, word Kind, fail admissionregistrationv1.FailurePolicyType) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{WordPolicyLabel: string(word), "app.kubernetes.io/name": "kubefence"}},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail}}
}

// policyBinding binds policy with actions.
func policyBinding(policy string, actions ...admissionregistrationv1.ValidationAction) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: policy},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy, ValidationActions: actions}}
}

// TestAskPermissionTrustsPolicyInForce: carol is on call through a group, which a word
// does not record, so a review of her user name is refused. Her word stands while the
// chart's policy of that word is in force (labelled for it, failing closed, bound with
// Deny), as the API server checked her, groups included, when she set it; without that
// policy it is refused, saying she was checked by user name only and which chart value
// turns the policy on.
func TestAskPermissionTrustsPolicyInForce(t *testing.T) {
	fail, ignore := admissionregistrationv1.Fail, admissionregistrationv1.Ignore
	deny, warn, audit := admissionregistrationv1.Deny, admissionregistrationv1.Warn, admissionregistrationv1.Audit
	confirm := Word{Kind: ConfirmOff, By: "carol", Reason: "chassis lost power"}
	cancel := Word{Kind: Cancel, By: "carol", Reason: "decommissioned"}
	byName := "so carol was checked by user name only, groups unknown"
	for name, tc := range map[string]struct {
		word    Word
		objects []runtime.Object
		list    error // the answer to a list of policies, nil: the objects
		says    []string
		err     bool
	}{
		"policy and its Deny binding": {word: confirm, objects: []runtime.Object{wordPolicy("kf-confirm-off", ConfirmOff, fail), policyBinding("kf-confirm-off", deny)}},
		"failurePolicy unset (Fail)": {word: confirm, objects: []runtime.Object{
			&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{WordPolicyLabel: "confirm-off"}}},
			policyBinding("p", warn, deny)}},
		"cancel: its policy": {word: cancel, objects: []runtime.Object{wordPolicy("kf-cancel", Cancel, fail), policyBinding("kf-cancel", deny)}},
		"binding missing": {word: confirm, objects: []runtime.Object{wordPolicy("kf-confirm-off", ConfirmOff, fail), policyBinding("other", deny)},
			says: []string{"policy kf-confirm-off has no binding with validationActions Deny", byName, "confirmOffPolicy.enabled=true"}},
		"binding warns and audits only": {word: confirm, objects: []runtime.Object{wordPolicy("kf-confirm-off", ConfirmOff, fail), policyBinding("kf-confirm-off", warn, audit)},
			says: []string{"policy kf-confirm-off has no binding with validationActions Deny", byName}},
		"failurePolicy Ignore": {word: confirm, objects: []runtime.Object{wordPolicy("kf-confirm-off", ConfirmOff, ignore), policyBinding("kf-confirm-off", deny)},
			says: []string{"policy kf-confirm-off has failurePolicy Ignore", byName}},
		"unlabelled policy": {word: confirm, objects: []runtime.Object{
			&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "kf-confirm-off"}}, policyBinding("kf-confirm-off", deny)},
			says: []string{"no ValidatingAdmissionPolicy is labelled fencing.kubefence.io/word=confirm-off", byName}},
		"cancel: only the confirm-off policy": {word: cancel, objects: []runtime.Object{wordPolicy("kf-confirm-off", ConfirmOff, fail), policyBinding("kf-confirm-off", deny)},
			says: []string{"no ValidatingAdmissionPolicy is labelled fencing.kubefence.io/word=cancel", "cancelPolicy.enabled=true", "carol may not create nodefences/cancel"}},
		"policy disabled": {word: confirm, says: []string{"carol may not create nodefences/confirm: no rule allows it",
			"the admission policy of confirm-off is not in force (no ValidatingAdmissionPolicy is labelled", byName}},
		"no ValidatingAdmissionPolicy served": {word: confirm,
			list: apierrors.NewNotFound(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}, ""),
			says: []string{"the cluster serves no admissionregistration.k8s.io/v1 validatingadmissionpolicies", byName, "confirmOffPolicy.enabled=true"}},
		"controller may not read policies": {word: confirm,
			list: apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}, "", errors.New("no")),
			says: []string{"the controller may not list validatingadmissionpolicies", byName}},
		"list fails otherwise": {word: confirm, list: errors.New("connection refused"), err: true},
	} {
		t.Run(name, func(t *testing.T) {
			kube, asked := reviewing(t, "alice")
			for _, o := range tc.objects {
				if err := kube.Tracker().Add(o); err != nil {
					t.Fatal(err)
				}
			}
			if tc.list != nil {
				kube.PrependReactor("list", "validatingadmissionpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, tc.list
				})
			}
			denied, err := AskPermission(context.Background(), kube, tc.word)
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want one: %v", err, tc.err)
			}
			if tc.says == nil {
				if denied != "" {
					t.Errorf("refused: %s", denied)
				}
				if len(*asked) != 0 {
					t.Errorf("reviews asked %+v; the policy in force answers", *asked)
				}
				return
			}
			for _, s := range tc.says {
				if !strings.Contains(denied, s) {
					t.Errorf("refusal %q does not say %q", denied, s)
				}
			}
			if len(*asked) != 1 || (*asked)[0].User != "carol" || len((*asked)[0].Groups) != 0 {
				t.Errorf("reviews asked %+v, want one of carol's user name", *asked)
			}
		})
	}
}
