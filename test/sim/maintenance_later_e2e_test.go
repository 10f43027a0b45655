package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// nodeMaintenanceCRD is the medik8s NodeMaintenance CRD as far as kubefence reads it: a
// cluster-scoped nodemaintenance.medik8s.io/v1beta1 kind whose spec.nodeName names the
// node (the operator's own schema has more fields, which kubefence never reads).
const nodeMaintenanceCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: nodemaintenances.nodemaintenance.medik8s.io
spec:
  group: nodemaintenance.medik8s.io
  scope: Cluster
  names: {kind: NodeMaintenance, listKind: NodeMaintenanceList, plural: nodemaintenances, singular: nodemaintenance}
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

// TestNodeMaintenanceInstalledAfterStart: the NodeMaintenance CRD is installed after the
// controller started, and a NodeMaintenance names a node; the controller follows the
// kind without a restart, and the node, falling silent, is held for maintenance naming
// it, its BMC left alone. Before, a kind whose CRD came later was watched only after a
// restart, and the node was fenced in the middle of its maintenance.
func TestNodeMaintenanceInstalledAfterStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, nil)
	c := h.Cluster
	victim := deployWeb(t, ctx, c)
	leader := startLeader(t, ctx, h, "controller-1")

	if err := InstallCRDs(ctx, c, [][]byte{[]byte(nodeMaintenanceCRD)}); err != nil {
		t.Fatal(err)
	}
	admin, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	nm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
		"metadata": map[string]any{"name": "nm-1"},
		"spec":     map[string]any{"nodeName": victim, "reason": "firmware update"},
	}}
	gvr := schema.GroupVersionResource{Group: "nodemaintenance.medik8s.io", Version: "v1beta1", Resource: "nodemaintenances"}
	if _, err := admin.Resource(gvr).Create(ctx, nm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller asks again every 30 s (maintenance.RediscoverEvery).
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(leader.Log(), "Following a planned-absence kind installed after the start"), nil
	})
	if err != nil {
		t.Fatalf("the controller never followed the NodeMaintenance kind installed after its start: %v", err)
	}
	// Its informer syncs right after; the node's Lease threshold is longer than that.
	c.Node(victim).Crash()
	nf := waitHeldForMaintenance(t, ctx, h, victim, "NodeMaintenance nm-1")
	staysHeld(t, ctx, h, victim, time.Now().Add(10*time.Second))
	if on, err := h.BMCs[victim].PoweredOn(); err != nil || !on {
		t.Errorf("BMC of %s under maintenance: powered on = %t (%v), want on", victim, on, err)
	}
	t.Logf("held: %s", nf.Status.Message)
}
