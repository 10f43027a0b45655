package oncall

import (
	"context"
	"fmt"

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

// Permission is the SubjectAccessReview that asks whether w's author, as the admission
// policy recorded them (the -by annotation), may give w: create nodefences/confirm or
// nodefences/cancel, the check the chart's policy makes when the word is set. The loop
// asks it again before it acts, since the policy may be off, or the cluster may have no
// ValidatingAdmissionPolicy at all. nil when w names no author.
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

// AskPermission asks the API server whether w's author may give w (Permission), and
// returns why the loop must not act on w, or "" when it may. A word that names no author
// is refused without asking, and so is one the controller may not ask about (its role
// has no create subjectaccessreviews); any other failed request is an error, asked again
// at the next sync. A review is a question: it writes nothing.
func AskPermission(ctx context.Context, client kubernetes.Interface, w Word) (string, error) {
	sar := Permission(w)
	what := fmt.Sprintf("create nodefences/%s", subresources[w.Kind])
	if sar == nil {
		return fmt.Sprintf("it names no author (%s is empty or missing), so nobody is known to be allowed to %s; the admission policy that records the author may be off",
			byAnnotations[w.Kind], what), nil
	}
	got, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
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
