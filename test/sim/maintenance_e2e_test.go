package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/maintenance"
	"github.com/kubefence/kubefence/pkg/policy"
)

// heldForMaintenance reports whether nf is held by the maintenance rule, as its latest
// hold step records.
func heldForMaintenance(nf v1alpha1.NodeFence) bool {
	if nf.Status.Phase != v1alpha1.PhaseHeld {
		return false
	}
	for i := len(nf.Status.Timeline) - 1; i >= 0; i-- {
		if s := nf.Status.Timeline[i]; s.Type == v1alpha1.StepHold {
			return strings.HasPrefix(s.Message, policy.ReasonMaintenance+":")
		}
	}
	return false
}

// waitHeldForMaintenance waits until node's only incident is held for maintenance with
// want in its message, and returns it.
func waitHeldForMaintenance(t *testing.T, ctx context.Context, h *Harness, node, want string) v1alpha1.NodeFence {
	t.Helper()
	nf, err := waitOnlyIncident(ctx, h, node, heldForMaintenance)
	if err != nil {
		t.Fatalf("incident of %s under maintenance: phase %s (%q), want Held for %s: %v",
			node, nf.Status.Phase, nf.Status.Message, policy.ReasonMaintenance, err)
	}
	if !strings.Contains(nf.Status.Message, want) {
		t.Errorf("hold message %q does not name the signal %q", nf.Status.Message, want)
	}
	t.Logf("held: %s", nf.Status.Message)
	return nf
}

// staysHeld checks, until the deadline, that node's BMC powered nothing off and its only
// incident stays held for maintenance while the controller decides on it again and again
// (every fencer.HoldRecheck).
func staysHeld(t *testing.T, ctx context.Context, h *Harness, node string, until time.Time) {
	t.Helper()
	for time.Now().Before(until) {
		events, err := h.BMCs[node].Events()
		if err != nil {
			t.Fatal(err)
		}
		if at, off := FirstPowerOff(events); off {
			t.Fatalf("the BMC of %s under maintenance was powered off at %s", node, at.Format(time.RFC3339Nano))
		}
		incs, err := Incidents(ctx, h.Cluster, node)
		if err != nil {
			t.Fatal(err)
		}
		if len(incs) != 1 || !heldForMaintenance(incs[0]) {
			t.Fatalf("incidents of %s under maintenance: %d, the last %s (%q), want one held for maintenance",
				node, len(incs), incs[len(incs)-1].Status.Phase, incs[len(incs)-1].Status.Message)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// TestAutoscalerDeletionHeldForTheWindow: a node the Cluster Autoscaler is deleting
// (its ToBeDeletedByClusterAutoscaler taint) falls silent with a StatefulSet pod on it.
// It is held with reason Maintenance naming the taint, and its BMC is left alone, until
// the policy's maintenance window has passed since its last sign of life; then the node,
// still silent, is fenced and released as any dead node.
func TestAutoscalerDeletionHeldForTheWindow(t *testing.T) {
	t.Parallel()
	const window = 40 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, func(c *v1alpha1.Config) {
		for i := range c.Policies {
			c.Policies[i].Maintenance.MaxWindow = metav1.Duration{Duration: window}
		}
	})
	c := h.Cluster
	victim := deployWeb(t, ctx, c)
	addTaint(t, ctx, c, victim, corev1.Taint{Key: maintenance.AutoscalerTaint, Value: "1700000000", Effect: corev1.TaintEffectNoSchedule})
	startLeader(t, ctx, h, "controller-1")

	c.Node(victim).Crash()
	crashed := time.Now()
	nf := waitHeldForMaintenance(t, ctx, h, victim, maintenance.AutoscalerTaint)
	// The window counts from the last renewal, at most a renewal period before the crash.
	staysHeld(t, ctx, h, victim, crashed.Add(window-2*time.Second))

	released := waitReleased(t, ctx, h, victim)
	started := stepTime(t, released, v1alpha1.StepFenceStarted)
	evidence := stepTime(t, nf, v1alpha1.StepEvidenceStarted)
	t.Logf("fence started %.1fs after the crash, %.1fs after the last sign of life (window %s)",
		started.Sub(crashed).Seconds(), started.Sub(evidence).Seconds(), window)
	if started.Sub(evidence) < window {
		t.Errorf("fence started at %s, %s after the last sign of life at %s: inside the %s window",
			started.Format(time.RFC3339Nano), started.Sub(evidence), evidence.Format(time.RFC3339Nano), window)
	}
	if on, err := h.BMCs[victim].PoweredOn(); err != nil || on {
		t.Errorf("BMC of %s after the window: powered on = %t (%v), want off", victim, on, err)
	}
}

// TestDeletingMachineHeld: the Cluster API Machine of a node is being deleted (its
// deletionTimestamp set, a finalizer keeping it) when the node falls silent. The node is
// held with reason Maintenance naming the Machine, with the default window, and its BMC
// is left alone. Once the Machine is gone and the node is still silent, the hold lifts
// and the node is fenced.
func TestDeletingMachineHeld(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, nil)
	c := h.Cluster
	victim := deployWeb(t, ctx, c)
	machines := deletingMachine(t, ctx, c, victim)
	startLeader(t, ctx, h, "controller-1")

	c.Node(victim).Crash()
	nf := waitHeldForMaintenance(t, ctx, h, victim, "Machine "+capiNamespace+"/m-1 is being deleted")
	// Long past the 5 s threshold, many decisions later.
	staysHeld(t, ctx, h, victim, stepTime(t, nf, v1alpha1.StepEvidenceStarted).Add(30*time.Second))

	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := machines.Patch(ctx, "m-1", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReleased(t, ctx, h, victim)
	if on, err := h.BMCs[victim].PoweredOn(); err != nil || on {
		t.Errorf("BMC of %s once the Machine was gone: powered on = %t (%v), want off", victim, on, err)
	}
}

// deletingMachine installs Cluster API's CRDs, makes Machine m-1 whose status.nodeRef
// names node, with a finalizer, and deletes it: it stays, being deleted. It returns the
// Machines of capiNamespace.
func deletingMachine(t *testing.T, ctx context.Context, c *Cluster, node string) dynamic.ResourceInterface {
	t.Helper()
	crds, err := CachedCRDs("cluster-api-"+ClusterAPIVersion, "cluster.x-k8s.io_machines.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := InstallCRDs(ctx, c, crds); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: capiNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	admin, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	machines := admin.Resource(machineGVR).Namespace(capiNamespace)
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": "m-1", "finalizers": []any{"machine.cluster.x-k8s.io"},
			"labels": map[string]any{"cluster.x-k8s.io/cluster-name": capiCluster}},
		"spec": map[string]any{"clusterName": capiCluster, "bootstrap": map[string]any{"dataSecretName": "m-1-bootstrap"},
			"infrastructureRef": map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachine", "name": "m-1"}},
	}}
	created, err := machines.Create(ctx, m, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = map[string]any{"nodeRef": map[string]any{"name": node}}
	if _, err := machines.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := machines.Delete(ctx, "m-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := machines.Get(ctx, "m-1", metav1.GetOptions{})
		return err == nil && got.GetDeletionTimestamp() != nil, nil
	})
	if err != nil {
		t.Fatalf("Machine m-1 not being deleted: %v", err)
	}
	return machines
}
