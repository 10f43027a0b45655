package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestNodeFenceInputRefused, on the real apiserver with the CRD and the chart's
// admission policies: a malformed or over-long nodeName, a requestedBy that names someone
// else (or "controller", from a person), a change of an existing spec, and a phase that
// leaves an ended incident are each refused with the rule's message. kubectl get's
// columns show what a person needs: the phase, the levels tried and verified, and with
// -o wide the message that says why.
func TestNodeFenceInputRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := rbacHarness(t, ctx)
	c := h.Cluster
	applyAdmissionPolicies(t, ctx, c)
	rules := []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"nodefences"}, Verbs: []string{"create", "update", "get"}}}
	operator := personClient(t, ctx, c, "operator", rules).Resource(v1alpha1.NodeFenceResource)
	admin, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	nodefences := admin.Resource(v1alpha1.NodeFenceResource)
	me := personName("operator")
	dry := metav1.CreateOptions{DryRun: []string{"All"}}

	// The policy takes a moment to be loaded by the API server: poll until it denies.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := operator.Create(ctx, nodeFenceRequest("someone-else", "node-1", "alice", false), dry)
		return err != nil && strings.Contains(err.Error(), "spec.requestedBy must be your user name"), nil
	})
	if err != nil {
		t.Fatalf("a person could name someone else in requestedBy")
	}
	for name, tc := range map[string]struct {
		obj  *unstructured.Unstructured
		want string
	}{
		"someone else":              {nodeFenceRequest("someone-else", "node-1", "alice", false), "spec.requestedBy must be your user name, " + me},
		"controller, from a person": {nodeFenceRequest("fake-controller", "node-1", "controller", false), "only the kubefence controller writes controller"},
		"nobody":                    {nodeFenceRequest("nobody", "node-1", "", false), "spec.requestedBy must be your user name"},
		"nodeName too long":         {nodeFenceRequest("long", strings.Repeat("a", 254), me, false), "spec.nodeName: Too long"},
		"nodeName malformed":        {nodeFenceRequest("malformed", "Node_1", me, false), "spec.nodeName in body should match"},
		"reason too long":           {withReason(nodeFenceRequest("chatty", "node-1", me, false), strings.Repeat("x", 1025)), "spec.reason: Too long"},
	} {
		_, err := operator.Create(ctx, tc.obj, dry)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: create answered %v, want it refused with %q", name, err, tc.want)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
	if _, err := operator.Create(ctx, nodeFenceRequest("mine", "node-1", me, false), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a request in the operator's own name was refused: %v", err)
	}
	nf, err := nodefences.Get(ctx, "mine", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(nf.Object, "node-2", "spec", "nodeName")
	if _, err := nodefences.Update(ctx, nf, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "spec is immutable") {
		t.Errorf("changing an existing spec, even as admin, answered %v; want it refused as immutable", err)
	}
	for i, phase := range []v1alpha1.Phase{v1alpha1.PhaseFailed, v1alpha1.PhasePending} {
		nf, err := nodefences.Get(ctx, "mine", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(nf.Object, string(phase), "status", "phase")
		if i == 0 {
			// One level, tried and failed: the controller moves Level past the last one.
			_ = unstructured.SetNestedField(nf.Object, "every level failed: ipmi: TargetUnreachable", "status", "message")
			now := time.Now().UTC().Format(time.RFC3339Nano)
			_ = unstructured.SetNestedField(nf.Object, int64(2), "status", "level")
			_ = unstructured.SetNestedSlice(nf.Object, []any{map[string]any{"level": int64(1), "agent": "ipmi", "try": int64(1),
				"state": "Failed", "started": now, "deadline": now}}, "status", "attempts")
		}
		_, err = nodefences.UpdateStatus(ctx, nf, metav1.UpdateOptions{})
		switch {
		case i == 0 && err != nil:
			t.Fatalf("status phase Failed refused: %v", err)
		case i == 1 && (err == nil || !strings.Contains(err.Error(), "keeps its phase")):
			t.Errorf("Failed back to Pending answered %v; want it refused", err)
		}
	}
	checkPrinterColumns(t, ctx, c, "mine", map[string]string{"Node": "node-1", "Phase": "Failed", "Level": "1",
		"Agent": "ipmi", "Reason": "test", "RequestedBy": me, "Message": "every level failed: ipmi: TargetUnreachable"})
	// A released incident shows the level that was read back as fenced.
	if _, err := operator.Create(ctx, nodeFenceRequest("released", "node-2", me, false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nf, err = nodefences.Get(ctx, "released", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	_ = unstructured.SetNestedField(nf.Object, string(v1alpha1.PhaseRemediated), "status", "phase")
	_ = unstructured.SetNestedField(nf.Object, int64(2), "status", "level")
	_ = unstructured.SetNestedField(nf.Object, int64(2), "status", "verifiedLevel")
	_ = unstructured.SetNestedField(nf.Object, "released 1 pod", "status", "message")
	_ = unstructured.SetNestedSlice(nf.Object, []any{
		map[string]any{"level": int64(1), "agent": "ipmi", "try": int64(1), "state": "Failed", "started": now, "deadline": now},
		map[string]any{"level": int64(2), "agent": "pdu", "try": int64(1), "state": "Verified", "started": now, "deadline": now}}, "status", "attempts")
	if _, err := nodefences.UpdateStatus(ctx, nf, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkPrinterColumns(t, ctx, c, "released", map[string]string{"Node": "node-2", "Phase": "Remediated", "Level": "2",
		"Verified": "2", "Agent": "pdu", "Message": "released 1 pod"})
}

// checkPrinterColumns reads NodeFence name as kubectl get does (a Table) and compares
// the cells of want.
func checkPrinterColumns(t *testing.T, ctx context.Context, c *Cluster, name string, want map[string]string) {
	t.Helper()
	var table metav1.Table
	err := c.Client.CoreV1().RESTClient().Get().AbsPath("/apis", v1alpha1.GroupName, "v1alpha1", "nodefences", name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx).Into(&table)
	if err != nil {
		t.Fatalf("get %s as a table: %v", name, err)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows", len(table.Rows))
	}
	got := map[string]string{}
	for i, col := range table.ColumnDefinitions {
		got[col.Name] = fmt.Sprint(table.Rows[0].Cells[i])
		// kubectl get shows priority 0; -o wide adds the message, which can be long.
		if wide := col.Name == "Message"; wide != (col.Priority == 1) || col.Priority > 1 {
			t.Errorf("column %s has priority %d", col.Name, col.Priority)
		}
	}
	for _, col := range []string{"Node", "Phase", "Level", "Verified", "Age", "Message"} {
		if _, ok := got[col]; !ok {
			t.Errorf("no column %s (columns: %v)", col, got)
		}
	}
	for col, v := range want {
		if got[col] != v {
			t.Errorf("column %s = %q, want %q (all: %v)", col, got[col], v, got)
		}
	}
	t.Logf("kubectl get nodefences: %v", got)
}

func withReason(u *unstructured.Unstructured, reason string) *unstructured.Unstructured {
	_ = unstructured.SetNestedField(u.Object, reason, "spec", "reason")
	return u
}
