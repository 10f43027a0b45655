package oncall

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// subresources are the virtual subresources whose create a word needs, as the chart's
// admission policies ask the authorizer; byAnnotations name each word's author.
var (
	subresources  = map[Kind]string{ConfirmOff: v1alpha1.SubresourceConfirm, Cancel: v1alpha1.SubresourceCancel}
	byAnnotations = map[Kind]string{ConfirmOff: v1alpha1.ConfirmOffByAnnotation, Cancel: v1alpha1.CancelByAnnotation}
)

// Permission is the SubjectAccessReview that asks whether w's author, by the user name
// its -by annotation records, may give w: create nodefences/confirm or nodefences/cancel,
// the check the chart's policy makes when the word is set. The loop asks it when that
// policy is not in force (PolicyInForce): turned off, or a cluster without
// ValidatingAdmissionPolicy. It names no groups, as the word records none. nil when w
// names no author.
func Permission(w Word) *authorizationv1.SubjectAccessReview {
	if w.By == "" {
		return nil
	}
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: w.By,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Group: v1alpha1.GroupName, Resource: "nodefences",
			Subresource: subresources[w.Kind], Verb: "create"}}}
}

// Read makes the reads of the API server an answer to w waits on (ActRead), onto f:
// whether w's author may give it (AskPermission), and for a cancel whether the Node
// object of node (nil: not in the cache) is gone, asked of the API server, as a person
// who just deleted it may be ahead of the cache: that decides what a cancel does.
func Read(ctx context.Context, client kubernetes.Interface, w Word, node *corev1.Node, f Facts) (Facts, error) {
	f.Read = true
	if w.Kind == Cancel && node != nil {
		_, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if f.NodeGone = apierrors.IsNotFound(err); err != nil && !f.NodeGone {
			return f, fmt.Errorf("read node %s: %w", node.Name, err)
		}
	}
	var err error
	f.Denied, err = AskPermission(ctx, client, w)
	return f, err
}

// AskPermission returns why the loop must not act on w, or "" when it may. A word that
// names no author is refused without asking. While the chart's admission policy of w is
// in force (PolicyInForce), the API server checked w's writer when it was set, groups
// included, and held -by to them: w stands. Otherwise the controller asks itself
// (review), by user name only; a refusal then says the policy is not in force and which
// chart value turns it on, since a person allowed only through a group is refused here.
// A failed read is an error, asked again at the next sync. It writes nothing.
func AskPermission(ctx context.Context, client kubernetes.Interface, w Word) (string, error) {
	if w.By == "" {
		return fmt.Sprintf("it names no author (%s is empty or missing), so nobody is known to be allowed to create nodefences/%s; the admission policy that records the author may be off",
			byAnnotations[w.Kind], subresources[w.Kind]), nil
	}
	off, err := PolicyInForce(ctx, client, w.Kind)
	if err != nil || off == "" {
		return "", err
	}
	denied, err := review(ctx, client, w)
	if err != nil || denied == "" {
		return "", err
	}
	return fmt.Sprintf("%s; the admission policy of %s is not in force (%s; the chart value %s=true renders it), so %s was checked by user name only, groups unknown",
		denied, w.Kind, off, policyValues[w.Kind], w.By), nil
}

// review asks the API server's authorizer whether w's author, by user name, may give w
// (Permission). One the controller may not ask about (its role has no create
// subjectaccessreviews) is refused; any other failed request is an error. A review is a
// question: it writes nothing.
func review(ctx context.Context, client kubernetes.Interface, w Word) (string, error) {
	what := fmt.Sprintf("create nodefences/%s", subresources[w.Kind])
	got, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, Permission(w), metav1.CreateOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("the controller may not ask whether %s may %s: %v", w.By, what, err), nil
	case err != nil:
		return "", fmt.Errorf("ask whether %s may %s: %w", w.By, what, err)
	case !got.Status.Allowed:
		why := got.Status.Reason
		if why == "" {
			why = "no rule allows it"
		}
		if got.Status.EvaluationError != "" {
			why += " (" + got.Status.EvaluationError + ")"
		}
		return fmt.Sprintf("%s may not %s: %s", w.By, what, why), nil
	}
	return "", nil
}

// WordPolicyLabel marks a ValidatingAdmissionPolicy as the chart's policy for one word,
// its value the word (confirm-off, cancel): the policy that lets a word be set only by
// someone the authorizer allows to give it, who names themself in its -by annotation.
const WordPolicyLabel = "fencing.kubefence.io/word"

// policyValues are the chart values that render each word's policy.
var policyValues = map[Kind]string{ConfirmOff: "confirmOffPolicy.enabled", Cancel: "cancelPolicy.enabled"}

// PolicyInForce says whether the API server holds every setting of a word of kind to
// its policy: a ValidatingAdmissionPolicy labelled WordPolicyLabel=kind whose
// failurePolicy is Fail (unset is Fail, the API's default), and a binding of it whose
// validationActions include Deny. Such a policy checked the word when it was set, with
// the writer's whole user info (groups too), and held -by to the writer's user name; the
// controller cannot ask that again, as a word records no groups. It returns "" when one
// is in force, else why none is. A cluster that serves no admissionregistration.k8s.io/v1
// policies (NotFound) or a controller that may not read them (Forbidden) has none in
// force; any other failed read is an error, asked again at the next sync. The reads are
// live, as the policy may have been turned off a moment ago.
func PolicyInForce(ctx context.Context, client kubernetes.Interface, kind Kind) (string, error) {
	selector := WordPolicyLabel + "=" + string(kind)
	api := client.AdmissionregistrationV1()
	policies, err := api.ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if why, err := unread("validatingadmissionpolicies", err); why != "" || err != nil {
		return why, err
	}
	if len(policies.Items) == 0 {
		return fmt.Sprintf("no ValidatingAdmissionPolicy is labelled %s", selector), nil
	}
	bindings, err := api.ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
	if why, err := unread("validatingadmissionpolicybindings", err); why != "" || err != nil {
		return why, err
	}
	return inForce(policies.Items, bindings.Items), nil
}

// unread turns a failed list of what into why no policy is known to be in force, or an
// error to ask again.
func unread(what string, err error) (string, error) {
	switch {
	case err == nil:
		return "", nil
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("the cluster serves no admissionregistration.k8s.io/v1 %s", what), nil
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("the controller may not list %s: %v", what, err), nil
	}
	return "", fmt.Errorf("list %s: %w", what, err)
}

// inForce returns "" when one of policies fails closed and is bound with Deny, else why
// none is.
func inForce(policies []admissionregistrationv1.ValidatingAdmissionPolicy, bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding) string {
	var why []string
	for _, p := range policies {
		if fp := p.Spec.FailurePolicy; fp != nil && *fp != admissionregistrationv1.Fail {
			why = append(why, fmt.Sprintf("policy %s has failurePolicy %s, which lets through a change it fails to check", p.Name, *fp))
			continue
		}
		if slices.ContainsFunc(bindings, func(b admissionregistrationv1.ValidatingAdmissionPolicyBinding) bool {
			return b.Spec.PolicyName == p.Name && slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny)
		}) {
			return ""
		}
		why = append(why, fmt.Sprintf("policy %s has no binding with validationActions Deny", p.Name))
	}
	return strings.Join(why, "; ")
}
