package kubectlfence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
)

// ErrNoReason: a person's word names no reason; the record would say nothing.
var ErrNoReason = errors.New("say why: --reason TEXT")

// DefaultPauseEntry is the pause request `pause` and `resume` write without --name.
const DefaultPauseEntry = "kubectl-fence"

// Clients are the API clients the plugin reads and writes with: the kubeconfig's.
type Clients struct {
	Kube    kubernetes.Interface
	Fencing versioned.Interface
}

// WhoAmI is the caller's user name as the API server authenticates it (a
// SelfSubjectReview, what `kubectl auth whoami` asks): the author of every word the plugin
// writes, never a name the caller types.
func (c Clients) WhoAmI(ctx context.Context) (string, error) {
	r, err := c.Kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("who am I (SelfSubjectReview): %w", err)
	}
	if r.Status.UserInfo.Username == "" {
		return "", errors.New("who am I (SelfSubjectReview): the API server names no user")
	}
	return r.Status.UserInfo.Username, nil
}

// Pause adds the pause request entry to r's pause ConfigMap, as docs/runbooks.md patches
// it: "WHO: REASON". The leader holds every new fence while any request stands.
func (c Clients) Pause(ctx context.Context, r Release, who, entry, reason string) error {
	if strings.TrimSpace(reason) == "" {
		return ErrNoReason
	}
	return c.patchPause(ctx, r, map[string]any{entry: who + ": " + reason})
}

// Resume lifts the pause requests entries of r (every one when all), and returns the ones
// it lifted; a request that does not stand is an error, with those that do.
func (c Clients) Resume(ctx context.Context, r Release, entries []string, all bool) ([]string, error) {
	have, err := c.PauseEntries(ctx, r)
	if err != nil {
		return nil, err
	}
	stand := map[string]bool{}
	var names []string
	for _, e := range have {
		stand[e.Name] = true
		names = append(names, e.Name)
	}
	if all {
		entries = names
	}
	patch := map[string]any{}
	for _, e := range entries {
		if !stand[e] {
			return nil, fmt.Errorf("no pause request %q in %s/%s; standing: %q", e, r.Namespace, r.PauseConfigMap, names)
		}
		patch[e] = nil
	}
	if len(patch) == 0 {
		return nil, nil
	}
	return entries, c.patchPause(ctx, r, patch)
}

// patchPause merges data into the data of r's pause ConfigMap (a nil value removes a key).
func (c Clients) patchPause(ctx context.Context, r Release, data map[string]any) error {
	b, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		return err
	}
	_, err = c.Kube.CoreV1().ConfigMaps(r.Namespace).Patch(ctx, r.PauseConfigMap, types.MergePatchType, b, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch the pause ConfigMap %s/%s: %w", r.Namespace, r.PauseConfigMap, err)
	}
	return nil
}

// ConfirmOff sets a person's word that node is off on its incident (named, or else its
// newest) when that is open or Failed (the incidents a confirm-off moves), and returns
// the incident's name.
func (c Clients) ConfirmOff(ctx context.Context, node, incident, who, reason string) (string, error) {
	if strings.TrimSpace(reason) == "" {
		return "", ErrNoReason
	}
	nf, err := c.confirmable(ctx, node, incident)
	if err != nil {
		return "", err
	}
	return nf.Name, c.annotate(ctx, nf.Name, map[string]string{
		v1alpha1.ConfirmOffAnnotation: reason, v1alpha1.ConfirmOffByAnnotation: who})
}

// confirmable is node's incident named incident (its newest when empty), if a confirm-off
// may move it.
func (c Clients) confirmable(ctx context.Context, node, incident string) (*v1alpha1.NodeFence, error) {
	var nf *v1alpha1.NodeFence
	if incident != "" {
		got, err := c.Fencing.FencingV1alpha1().NodeFences().Get(ctx, incident, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("read incident %s: %w", incident, err)
		}
		if got.Spec.NodeName != node {
			return nil, fmt.Errorf("incident %s is of node %s, not %s", incident, got.Spec.NodeName, node)
		}
		nf = got
	} else {
		nfs, err := c.nodeFences(ctx, node)
		if err != nil {
			return nil, err
		}
		if len(nfs) == 0 {
			return nil, fmt.Errorf("node %s has no incident to confirm off", node)
		}
		nf = &nfs[0]
	}
	if !nf.Status.Phase.Open() && nf.Status.Phase != v1alpha1.PhaseFailed {
		return nil, fmt.Errorf("incident %s of %s ended %s: nothing to confirm off", nf.Name, node, nf.Status.Phase)
	}
	return nf, nil
}

// Cancel sets a person's cancel on incident name.
func (c Clients) Cancel(ctx context.Context, name, who, reason string) error {
	if strings.TrimSpace(reason) == "" {
		return ErrNoReason
	}
	return c.annotate(ctx, name, map[string]string{v1alpha1.CancelAnnotation: reason, v1alpha1.CancelByAnnotation: who})
}

// Force sets the force annotation on incident name: fence it past the budget.
func (c Clients) Force(ctx context.Context, name string) error {
	return c.annotate(ctx, name, map[string]string{v1alpha1.ForceAnnotation: "true"})
}

// Fence creates a person's request to fence node, in who's name, as docs/runbooks.md
// does (generateName NODE-), and returns the new incident's name.
func (c Clients) Fence(ctx context.Context, node, who, reason string) (string, error) {
	if strings.TrimSpace(reason) == "" {
		return "", ErrNoReason
	}
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-"},
		Spec: v1alpha1.NodeFenceSpec{NodeName: node, RequestedBy: who, Reason: reason}}
	got, err := c.Fencing.FencingV1alpha1().NodeFences().Create(ctx, nf, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request a fence of %s: %w", node, err)
	}
	return got.Name, nil
}

// annotate merges annotations into incident name's.
func (c Clients) annotate(ctx context.Context, name string, annotations map[string]string) error {
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	if _, err := c.Fencing.FencingV1alpha1().NodeFences().Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotate incident %s: %w", name, err)
	}
	return nil
}
