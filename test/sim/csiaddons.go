package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/test/sim/csiaddons"
)

// CSIAddons is the real csi-addons controller (kubernetes-csi-addons' manager, built by
// hack/deps.sh) running against the cluster, and the test CSI driver it fences with.
// The controller finds the driver as in a cluster: a CSIAddonsNode names the driver's
// endpoint as pod://<pod>.<namespace>:<port>, the pod's status.podIP is the address it
// dials (here loopback, the pod never runs), and the driver's Lease names the pod.
type CSIAddons struct {
	Driver *csiaddons.Driver
	proc   *process
}

const (
	csiAddonsNamespace = "csi-addons-test"
	csiAddonsPod       = "fence-driver-0"
)

var csiAddonsNodeGVR = schema.GroupVersionResource{Group: "csiaddons.openshift.io", Version: "v1alpha1", Resource: "csiaddonsnodes"}

// csiAddonsLeaseName is the Lease csi-addons reads to pick a driver's connection: the
// driver's name with every character outside [a-zA-Z0-9-] made "-", and "-csi-addons".
func csiAddonsLeaseName(driver string) string {
	return regexp.MustCompile(`[^a-zA-Z0-9-]`).ReplaceAllString(driver, "-") + "-csi-addons"
}

// StartCSIAddons installs csi-addons' CRDs, starts the test driver (required are the
// parameters it insists on) and the csi-addons controller, and waits until the
// controller has connected to the driver.
func StartCSIAddons(ctx context.Context, c *Cluster, dir, driver string, required ...string) (*CSIAddons, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(root, ".cache", "bin", "csi-addons-manager-"+CSIAddonsVersion)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("the csi-addons controller: %w (hack/deps.sh builds it: run make deps)", err)
	}
	crds, err := CachedCRDs("csi-addons-" + CSIAddonsVersion)
	if err != nil {
		return nil, err
	}
	if err := InstallCRDs(ctx, c, crds); err != nil {
		return nil, err
	}
	d, err := csiaddons.Start(driver, required...)
	if err != nil {
		return nil, err
	}
	a := &CSIAddons{Driver: d}
	if err := registerDriver(ctx, c, driver, d.Port()); err != nil {
		d.Stop()
		return nil, err
	}
	// No leader election, metrics or probes; plain gRPC: with auth on, the controller
	// sends a pod's ServiceAccount token over TLS, and there is no pod here.
	a.proc, err = startProcess(dir, "csi-addons", bin, []string{"--enable-auth=false", "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--namespace=" + csiAddonsNamespace}, "KUBECONFIG="+c.Kubeconfig)
	if err != nil {
		d.Stop()
		return nil, err
	}
	if err := waitConnected(ctx, c); err != nil {
		_ = a.Stop()
		return nil, fmt.Errorf("%w (log: %s)", err, a.proc.logPath)
	}
	return a, nil
}

// Stop stops the controller and the driver.
func (a *CSIAddons) Stop() error {
	err := a.proc.stop(5 * time.Second)
	a.Driver.Stop()
	return err
}

// registerDriver makes what a csi-addons sidecar makes in a cluster: the driver's pod
// (never scheduled, its status saying where it answers), its Lease, and its
// CSIAddonsNode.
func registerDriver(ctx context.Context, c *Cluster, driver string, port int) error {
	cs := c.Client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: csiAddonsNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: csiAddonsNamespace, Name: csiAddonsPod},
		Spec: corev1.PodSpec{SchedulerName: "kubefence-test-none", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "driver", Image: "kubefence.test/none"}}}}
	created, err := cs.CoreV1().Pods(csiAddonsNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("driver pod: %w", err)
	}
	created.Status.PodIP, created.Status.PodIPs = "127.0.0.1", []corev1.PodIP{{IP: "127.0.0.1"}}
	if _, err := cs.CoreV1().Pods(csiAddonsNamespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("driver pod's address: %w", err)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: csiAddonsNamespace, Name: csiAddonsLeaseName(driver)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(csiAddonsPod)}}
	if _, err := cs.CoordinationV1().Leases(csiAddonsNamespace).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("driver Lease: %w", err)
	}
	dyn, err := dynamicClient(c)
	if err != nil {
		return err
	}
	node := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "csiaddons.openshift.io/v1alpha1", "kind": "CSIAddonsNode",
		"metadata": map[string]any{"namespace": csiAddonsNamespace, "name": csiAddonsPod},
		"spec": map[string]any{"driver": map[string]any{"name": driver, "nodeID": "controller",
			"endpoint": fmt.Sprintf("pod://%s.%s:%d", csiAddonsPod, csiAddonsNamespace, port)}},
	}}
	if _, err := dyn.Resource(csiAddonsNodeGVR).Namespace(csiAddonsNamespace).Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("CSIAddonsNode: %w", err)
	}
	return nil
}

// waitConnected waits until csi-addons has connected to the driver: a NetworkFence
// created before that fails and waits out csi-addons' backoff.
func waitConnected(ctx context.Context, c *Cluster) error {
	dyn, err := dynamicClient(c)
	if err != nil {
		return err
	}
	var state string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := dyn.Resource(csiAddonsNodeGVR).Namespace(csiAddonsNamespace).Get(ctx, csiAddonsPod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		state, _, _ = unstructured.NestedString(n.Object, "status", "state")
		return state == "Connected", nil
	})
	if err != nil {
		return fmt.Errorf("csi-addons never connected to the test driver (CSIAddonsNode state %q): %w", state, err)
	}
	return nil
}
