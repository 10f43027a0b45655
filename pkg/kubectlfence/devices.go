package kubectlfence

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/oncall"
)

// ExecGrant is where the runbooks grant a person pods/exec in the release namespace.
const ExecGrant = `docs/runbooks.md, "First look" (the Role kubefence-ask-leader)`

// devicesTimeout bounds status's asks of the leader: status answers without them.
const devicesTimeout = 20 * time.Second

// devicesSubcommand is the leader's answer of its devices' last reads, as its usage
// (`fence-controller -h`) lists it.
const devicesSubcommand = "devices"

// CanExec reports whether the caller may exec in the pods of namespace: create
// pods/exec, as a SelfSubjectAccessReview (kubectl auth can-i) says.
func (c Clients) CanExec(ctx context.Context, namespace string) (bool, error) {
	r, err := c.Kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: "create", Resource: "pods", Subresource: "exec"}}}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("may you exec in %s (SelfSubjectAccessReview): %w", namespace, err)
	}
	return r.Status.Allowed, nil
}

// ReadDevices asks r's leader for the last read of every node's fence device:
// `fence-controller devices -o json` in its controller container, once its usage says it
// has that subcommand (an older binary would take the word for an argument and start a
// second controller there). The error says why there is no answer: the caller may not
// exec there, or the leader did not answer.
func (c Clients) ReadDevices(ctx context.Context, exec Exec, r Release, now time.Time) (*oncall.Devices, error) {
	ok, err := c.CanExec(ctx, r.Namespace)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("they are the leader's, asked by exec in its pod, and you may not exec in %s: get and create pods/exec, granted in %s",
			r.Namespace, ExecGrant)
	}
	ctx, cancel := context.WithTimeout(ctx, devicesTimeout)
	defer cancel()
	pod, err := LeaderPod(ctx, c.Kube, r, now)
	if err != nil {
		return nil, fmt.Errorf("the leader did not answer: %w", err)
	}
	usage, help, err := execController(ctx, exec, pod, "-h")
	if err != nil {
		return nil, fmt.Errorf("the leader did not answer its usage (fence-controller -h): %w", err)
	}
	if !strings.Contains(string(usage)+string(help), "fence-controller "+devicesSubcommand+" ") {
		return nil, fmt.Errorf("the leader's fence-controller in pod %s has no %s subcommand: the release is older than this plugin", pod.Name, devicesSubcommand)
	}
	out, _, err := execController(ctx, exec, pod, devicesSubcommand, "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("the leader did not answer (fence-controller devices in pod %s): %w", pod.Name, err)
	}
	var d oncall.Devices
	if err := json.Unmarshal(out, &d); err != nil {
		return nil, fmt.Errorf("the leader's answer (fence-controller devices in pod %s): %w", pod.Name, err)
	}
	return &d, nil
}

// execController runs `fence-controller SUB ARGS...` in pod's controller container, and
// returns its stdout and stderr; an error carries the first of what it wrote to stderr.
func execController(ctx context.Context, exec Exec, pod *corev1.Pod, sub string, args ...string) ([]byte, []byte, error) {
	container, cmd := ControllerCommand(pod, sub, args...)
	var out, errOut bytes.Buffer
	if err := exec(ctx, pod.Namespace, pod.Name, container, cmd, &out, &errOut); err != nil {
		if said := firstLine(errOut.String()); said != "" {
			return nil, nil, fmt.Errorf("%w: %s", err, said)
		}
		return nil, nil, err
	}
	return out.Bytes(), errOut.Bytes(), nil
}

// firstLine is the first non-empty line of s, its spaces folded.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			return l
		}
	}
	return ""
}
