package kubectlfence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/leader"
)

// ErrNoLeader: the leader Lease has no holder, or none that is alive.
var ErrNoLeader = errors.New("no leader")

// controllerBinary is fence-controller in the chart's image, for a container that names
// no command.
const controllerBinary = "/usr/local/bin/fence-controller"

// Leader is the replica that holds the release's leader Lease.
type Leader struct {
	// Identity is the Lease's holder: hostname_PID_suffix (pkg/leader.NewIdentity).
	Identity string `json:"identity"`
	// Pod is the replica's pod: the owner of its identity Lease, else the identity's host
	// name (a pod's host name is its name). Empty when neither is a pod of the namespace.
	Pod string `json:"pod,omitempty"`
	// Node is the node the replica runs on.
	Node string `json:"node,omitempty"`
	// Epoch is the fencing epoch the leader acts under (the Lease's transitions + 1).
	Epoch int64 `json:"epoch"`
	// RenewTime is the leader's last renewal of the Lease.
	RenewTime *time.Time `json:"renewTime,omitempty"`
	// Expired: the Lease was not renewed within its duration, by the reader's clock.
	Expired bool `json:"expired,omitempty"`
}

// FindLeader reads the leader Lease of r and maps its holder to a pod: through the
// holder's identity Lease (pkg/leader.LeaseName), which the replica's pod owns and which
// names its node, else through the identity's host name.
func FindLeader(ctx context.Context, kube kubernetes.Interface, r Release, now time.Time) (*Leader, error) {
	lease, err := kube.CoordinationV1().Leases(r.Namespace).Get(ctx, r.Lease, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read the leader Lease %s/%s: %w", r.Namespace, r.Lease, err)
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder == "" {
		return nil, fmt.Errorf("lease %s/%s has no holder: %w", r.Namespace, r.Lease, ErrNoLeader)
	}
	l := &Leader{Identity: holder, Epoch: int64(ptr.Deref(lease.Spec.LeaseTransitions, 0)) + 1}
	if rt := lease.Spec.RenewTime; rt != nil {
		t := rt.Time
		l.RenewTime = &t
		if d := lease.Spec.LeaseDurationSeconds; d != nil {
			l.Expired = now.After(t.Add(time.Duration(*d) * time.Second))
		}
	}
	id, err := kube.CoordinationV1().Leases(r.Namespace).Get(ctx, leader.LeaseName("controller", holder), metav1.GetOptions{})
	switch {
	case err == nil:
		l.Node = id.Annotations[v1alpha1.NodeAnnotation]
		for _, o := range id.OwnerReferences {
			if o.Kind == "Pod" {
				l.Pod = o.Name
			}
		}
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("read the leader's identity Lease: %w", err)
	}
	if l.Pod == "" {
		host, _, _ := strings.Cut(holder, "_")
		l.Pod = host
	}
	pod, err := kube.CoreV1().Pods(r.Namespace).Get(ctx, l.Pod, metav1.GetOptions{})
	switch {
	case err == nil:
		if pod.Spec.NodeName != "" {
			l.Node = pod.Spec.NodeName
		}
	case apierrors.IsNotFound(err):
		l.Pod = ""
	default:
		return nil, fmt.Errorf("read the leader's pod %s/%s: %w", r.Namespace, l.Pod, err)
	}
	return l, nil
}

// LeaderPod is the pod of r's leader, to exec in: a leader whose Lease expired, or that
// runs outside a pod, answers nothing.
func LeaderPod(ctx context.Context, kube kubernetes.Interface, r Release, now time.Time) (*corev1.Pod, error) {
	l, err := FindLeader(ctx, kube, r, now)
	if err != nil {
		return nil, err
	}
	if l.Expired {
		return nil, fmt.Errorf("the leader Lease %s/%s of %s expired at its last renewal (%s): %w",
			r.Namespace, r.Lease, l.Identity, l.RenewTime.UTC().Format(time.RFC3339), ErrNoLeader)
	}
	if l.Pod == "" {
		return nil, fmt.Errorf("the leader %s is no pod of %s: %w", l.Identity, r.Namespace, ErrNoLeader)
	}
	pod, err := kube.CoreV1().Pods(r.Namespace).Get(ctx, l.Pod, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read the leader's pod %s/%s: %w", r.Namespace, l.Pod, err)
	}
	return pod, nil
}

// passedFlags are the controller's flags that its subcommands take too: the same
// configuration file and pause ConfigMap as the leader's, and the socket where the
// running leader answers explain from its own view.
var passedFlags = []string{"config", "pause-configmap", "answer-socket"}

// ControllerCommand is what to exec in pod to run `fence-controller SUB ARGS...` as its
// controller container runs the controller: that container, its binary, and its
// --config and --pause-configmap. It returns the container's name and the command.
func ControllerCommand(pod *corev1.Pod, sub string, args ...string) (string, []string) {
	c := &corev1.Container{Name: ControllerContainer}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == ControllerContainer {
			c = &pod.Spec.Containers[i]
		}
	}
	bin := controllerBinary
	if len(c.Command) > 0 {
		bin = c.Command[0]
	}
	cmd := append([]string{bin, sub}, args...)
	all := append(append([]string(nil), c.Command[min(1, len(c.Command)):]...), c.Args...)
	for _, f := range passedFlags {
		if v, ok := flagValue(all, f); ok {
			cmd = append(cmd, "--"+f+"="+v)
		}
	}
	return c.Name, cmd
}
