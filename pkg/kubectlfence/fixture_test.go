package kubectlfence

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	"github.com/kubefence/kubefence/pkg/leader"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const (
	ns       = "ops"
	identity = "prod-kubefence-controller-7d9f-abcde_1_0a1b2c3d"
	podName  = "prod-kubefence-controller-7d9f-abcde"
)

// release is the Helm release prod (full name prod-kubefence) in ns, led by podName on
// node-9, its pause ConfigMap holding one request.
func release() []runtime.Object {
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: podName, UID: "uid-1"}
	return []runtime.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "prod-kubefence-controller", Namespace: ns,
			Labels: map[string]string{componentLabel: "controller", instanceLabel: "prod"}},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: controllerPodSpec()}}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "prod-kubefence-controller", Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(identity), LeaseTransitions: ptr.To[int32](2),
				LeaseDurationSeconds: ptr.To[int32](15), RenewTime: ptr.To(metav1.NewMicroTime(now.Add(-2 * time.Second)))}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leader.LeaseName("controller", identity), Namespace: ns,
			OwnerReferences: []metav1.OwnerReference{owner}, Annotations: map[string]string{v1alpha1.NodeAnnotation: "node-9"}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: ns}, Spec: func() corev1.PodSpec {
			s := controllerPodSpec()
			s.NodeName = "node-9"
			return s
		}()},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "prod-kubefence-pause", Namespace: ns,
			Labels: map[string]string{v1alpha1.PauseLabel: "true"}}, Data: map[string]string{"storm": "bob: partition"}},
	}
}

// controllerPodSpec is the chart's controller container, as templates/deployment.yaml
// renders it for the release prod.
func controllerPodSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{
		{Name: "sidecar", Image: "other"},
		{Name: "controller", Command: []string{"/usr/local/bin/fence-controller"}, Args: []string{
			"--config=/run/kubefence/config.yaml", "--pause-configmap=prod-kubefence-pause",
			"--metrics-bind-address=:8080", "-v=2"}},
	}}
}

// incidents are node-1's three (the newest open, held by the budget) and node-2's one.
func incidents() []runtime.Object {
	nf := func(name, node string, age time.Duration, phase v1alpha1.Phase) *v1alpha1.NodeFence {
		return &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Spec:   v1alpha1.NodeFenceSpec{NodeName: node, RequestedBy: v1alpha1.RequestedByController},
			Status: v1alpha1.NodeFenceStatus{Phase: phase, Message: "msg " + name}}
	}
	held := nf("node-1-c", "node-1", time.Minute, v1alpha1.PhaseHeld)
	held.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionHeld, Status: metav1.ConditionTrue,
		Reason: "UnhealthyBudgetExceeded", Message: "3 of 5 nodes unhealthy"}}
	held.Status.Timeline = []v1alpha1.Step{
		{Time: metav1.NewMicroTime(now.Add(-time.Minute)), Type: "Detected", Message: "lease stale"},
		{Time: metav1.NewMicroTime(now.Add(-50 * time.Second)), Type: "Held", Message: "budget"}}
	return []runtime.Object{
		nf("node-1-a", "node-1", 3*time.Hour, v1alpha1.PhaseRecovered),
		nf("node-1-b", "node-1", 2*time.Hour, v1alpha1.PhaseCancelled),
		held,
		nf("node-2-a", "node-2", 5*time.Minute, v1alpha1.PhaseFenced),
	}
}

// fixture is the clients of a cluster holding objs, whose API server names the caller
// user, and gives created NodeFences a name from their generateName.
func fixture(t *testing.T, user string, objs ...runtime.Object) (Clients, *kubefake.Clientset, *fencingfake.Clientset) {
	t.Helper()
	var kubeObjs, fencingObjs []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*v1alpha1.NodeFence); ok {
			fencingObjs = append(fencingObjs, o)
		} else {
			kubeObjs = append(kubeObjs, o)
		}
	}
	kube := kubefake.NewClientset(kubeObjs...)
	kube.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{
			UserInfo: authenticationv1.UserInfo{Username: user}}}, nil
	})
	fencing := fencingfake.NewSimpleClientset(fencingObjs...)
	n := 0
	fencing.PrependReactor("create", "nodefences", func(a k8stesting.Action) (bool, runtime.Object, error) {
		nf := a.(k8stesting.CreateAction).GetObject().(*v1alpha1.NodeFence)
		if nf.Name == "" {
			n++
			nf.Name = fmt.Sprintf("%sx%d", nf.GenerateName, n)
		}
		return false, nil, nil
	})
	return Clients{Kube: kube, Fencing: fencing}, kube, fencing
}

// execCall is one command the fake Exec ran.
type execCall struct {
	namespace, pod, container string
	cmd                       []string
}

// run runs the CLI on c with args and returns its exit code, stdout and stderr; exec
// answers every exec with answer and code, recording the calls.
func run(t *testing.T, c Clients, answer string, code int, calls *[]execCall, args ...string) (int, string, string) {
	t.Helper()
	exec := func(_ context.Context, namespace, pod, container string, cmd []string, stdout, _ io.Writer) error {
		*calls = append(*calls, execCall{namespace, pod, container, cmd})
		io.WriteString(stdout, answer)
		if code != 0 {
			return ExitError{Code: code}
		}
		return nil
	}
	var out, errOut bytes.Buffer
	cli := CLI{Stdout: &out, Stderr: &errOut, Now: func() time.Time { return now },
		Connect: func(Globals) (Clients, Exec, error) { return c, exec, nil }}
	rc := cli.Run(context.Background(), args)
	return rc, out.String(), errOut.String()
}

func mustContain(t *testing.T, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("output has no %q:\n%s", w, got)
		}
	}
}
