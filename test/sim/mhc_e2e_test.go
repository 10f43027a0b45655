package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

var (
	clusterGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "clusters"}
	mhcGVR     = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machinehealthchecks"}
)

// workloadCluster makes Cluster capiCluster as Cluster API's own controllers would have
// left a provisioned one: infrastructure provisioned, control plane initialized, and its
// kubeconfig Secret, here for the same API server.
func workloadCluster(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	admin, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	cl := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"metadata": map[string]any{"namespace": capiNamespace, "name": capiCluster},
		"spec":     map[string]any{"controlPlaneEndpoint": map[string]any{"host": "127.0.0.1", "port": int64(6443)}},
	}}
	created, err := admin.Resource(clusterGVR).Namespace(capiNamespace).Create(ctx, cl, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now().UTC().Format(time.RFC3339)
	cond := func(typ string) map[string]any {
		return map[string]any{"type": typ, "status": "True", "reason": "Provisioned", "message": "", "lastTransitionTime": now}
	}
	created.Object["status"] = map[string]any{
		"initialization": map[string]any{"infrastructureProvisioned": true, "controlPlaneInitialized": true},
		"conditions":     []any{cond("InfrastructureReady"), cond("ControlPlaneInitialized"), cond("ControlPlaneAvailable")},
	}
	if _, err := admin.Resource(clusterGVR).Namespace(capiNamespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: capiNamespace, Name: capiCluster + "-kubeconfig",
		Labels: map[string]string{"cluster.x-k8s.io/cluster-name": capiCluster}},
		Type: "cluster.x-k8s.io/secret", Data: map[string][]byte{"value": kc}}
	if _, err := c.Client.CoreV1().Secrets(capiNamespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// startMHCController runs Cluster API's MachineHealthCheck controller (hack/deps.sh
// builds test/sim/mhc) with admin credentials, and a MachineHealthCheck over the
// Machines labelled pool=workers: a node Ready=Unknown for 10 s is remediated through
// kubefence's template.
func startMHCController(t *testing.T, ctx context.Context, c *Cluster) *process {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, ".cache", "bin", "mhc-controller")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Cluster API's MachineHealthCheck controller: %v (hack/deps.sh builds it: run make deps)", err)
	}
	admin, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	mhc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
		"metadata": map[string]any{"namespace": capiNamespace, "name": "workers", "labels": map[string]any{"cluster.x-k8s.io/cluster-name": capiCluster}},
		"spec": map[string]any{
			"clusterName": capiCluster,
			"selector":    map[string]any{"matchLabels": map[string]any{"pool": "workers"}},
			"checks": map[string]any{"nodeStartupTimeoutSeconds": int64(0),
				"unhealthyNodeConditions": []any{map[string]any{"type": "Ready", "status": "Unknown", "timeoutSeconds": int64(10)}}},
			"remediation": map[string]any{"templateRef": map[string]any{
				"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "KubefenceRemediationTemplate", "name": nhcTemplate}},
		},
	}}
	if _, err := admin.Resource(mhcGVR).Namespace(capiNamespace).Create(ctx, mhc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := startProcess(t.TempDir(), "mhc-controller", bin, []string{"-v=2"}, "KUBECONFIG="+c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if data, err := os.ReadFile(p.logPath); err == nil {
				t.Logf("--- mhc-controller log (last 4 KiB) ---\n%s", data[max(0, len(data)-4096):])
			}
		}
		_ = p.stop(5 * time.Second)
	})
	return p
}

// waitMHC polls the MachineHealthCheck's status until ok holds for it.
func waitMHC(t *testing.T, ctx context.Context, c *Cluster, what string, ok func(st map[string]any) bool) {
	t.Helper()
	admin, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	var last map[string]any
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := admin.Resource(mhcGVR).Namespace(capiNamespace).Get(ctx, "workers", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last, _, _ = unstructured.NestedMap(m.Object, "status")
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("MachineHealthCheck never %s: status %v: %v", what, last, err)
	}
}

// TestMachineHealthCheckController: Cluster API's own MachineHealthCheck controller
// (v1.11.3) watches a Machine whose node dies, creates its request from kubefence's
// template after the node has been Ready=Unknown for 10 s, and kubefence, run as the
// chart installs it, fences the node and releases its pod; after the power cycle the node
// is healthy again and the MachineHealthCheck deletes its request, which undoes nothing.
func TestMachineHealthCheckController(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h, kubeconfig, cfgPath := healthCheckerHarness(t, ctx)
	c := h.Cluster
	victim := deployWeb(t, ctx, c)
	client, m := machineHealthCheck(t, ctx, c, victim)
	workloadCluster(t, ctx, c)
	startMHCController(t, ctx, c)
	waitMHC(t, ctx, c, "counted the Machine healthy", func(st map[string]any) bool {
		healthy, _, _ := unstructured.NestedInt64(st, "currentHealthy")
		return healthy == 1
	})
	startLeader(t, ctx, h, "controller-mhc", "--config", cfgPath, "--kubeconfig", kubeconfig)

	crashed := time.Now()
	c.Node(victim).Crash()
	nf := waitReleased(t, ctx, h, victim)
	if req, err := client.Resource(v1alpha1.RemediationResource).Namespace(capiNamespace).Get(ctx, m.GetName(), metav1.GetOptions{}); err == nil {
		t.Logf("the MachineHealthCheck made its request %s after the crash; the pod ran elsewhere %s after it",
			req.GetCreationTimestamp().Sub(crashed).Round(time.Second), time.Since(req.GetCreationTimestamp().Time).Round(time.Second))
		if req.GetLabels()["team"] != "storage" {
			t.Errorf("request labels %v: the template's spec.template.metadata was not kept", req.GetLabels())
		}
	}
	requestIncident(t, ctx, c, victim, fmt.Sprintf("MachineHealthCheck of Machine %s/%s", capiNamespace, m.GetName()))
	if nf.Status.VerifiedLevel != 1 {
		t.Errorf("incident %s verified at level %d, want 1", nf.Name, nf.Status.VerifiedLevel)
	}
	if on, err := h.BMCs[victim].PoweredOn(); err != nil || on {
		t.Errorf("BMC of %s: powered on = %t (%v), want off", victim, on, err)
	}

	powerOn(t, ctx, h, victim)
	if final, err := waitOnlyIncident(ctx, h, victim, recovered); err != nil {
		t.Fatalf("incident not recovered after the power cycle: phase %s: %v", final.Status.Phase, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.Resource(v1alpha1.RemediationResource).Namespace(capiNamespace).Get(ctx, m.GetName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("the MachineHealthCheck did not delete its request once the Machine was healthy: %v", err)
	}
	if final := requestIncident(t, ctx, c, victim, "MachineHealthCheck of Machine"); final.Status.Phase != v1alpha1.PhaseRecovered {
		t.Errorf("incident %s after the request was deleted: %s, want Recovered", final.Name, final.Status.Phase)
	}
}
