package sim

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestPeopleRolesAndTheirWords, on the real API server in RBAC mode with the chart's
// rendered people roles and admission policies: Kubernetes' own view and edit roles read
// NodeFences through aggregation and may not ask for one (DESIGN invariant 14); the
// chart's requester role asks, and is refused force, confirm-off and cancel by the API
// server; the chart's on-call role may set confirm-off and cancel, in their own name and
// with a reason only.
func TestPeopleRolesAndTheirWords(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := rbacHarness(t, ctx)
	c := h.Cluster
	applyAdmissionPolicies(t, ctx, c)
	applyPeopleRoles(t, ctx, c)
	nodefences := func(d dynamic.Interface) dynamic.ResourceInterface { return d.Resource(v1alpha1.NodeFenceResource) }
	viewer := nodefences(personWithRole(t, ctx, c, "viewer", "view"))
	k8sEditor := nodefences(personWithRole(t, ctx, c, "k8s-editor", "edit"))
	editor := nodefences(personWithRole(t, ctx, c, "editor", "kubefence-requester"))
	oncall := nodefences(personWithRole(t, ctx, c, "oncall", "kubefence-oncall"))

	// kube-controller-manager aggregates the chart's roles into view and edit, and the
	// API server loads the policies, each in a moment: poll until both show.
	poll := func(what string, ok func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true,
			func(context.Context) (bool, error) { return ok(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	poll("view never read NodeFences", func() bool {
		_, err := viewer.List(ctx, metav1.ListOptions{})
		return err == nil
	})
	poll("edit never read NodeFences", func() bool {
		_, err := k8sEditor.List(ctx, metav1.ListOptions{})
		return err == nil
	})
	if _, err := k8sEditor.Create(ctx, nodeFenceRequest("by-k8s-editor", "node-1", personName("k8s-editor"), false), metav1.CreateOptions{}); err == nil {
		t.Errorf("Kubernetes' edit may create a NodeFence")
	}
	poll("the requester never asked for a fence", func() bool {
		_, err := editor.Create(ctx, nodeFenceRequest("incident", "node-1", personName("editor"), false), metav1.CreateOptions{})
		return err == nil
	})
	if _, err := viewer.Create(ctx, nodeFenceRequest("by-viewer", "node-1", personName("viewer"), false), metav1.CreateOptions{}); err == nil {
		t.Errorf("view may create a NodeFence")
	}
	annotate := func(who dynamic.ResourceInterface, dryRun bool, annotations map[string]any) error {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
		o := metav1.PatchOptions{}
		if dryRun {
			o.DryRun = []string{metav1.DryRunAll}
		}
		_, err := who.Patch(ctx, "incident", types.MergePatchType, patch, o)
		return err
	}
	confirm := func(reason, by string) map[string]any {
		return map[string]any{v1alpha1.ConfirmOffAnnotation: reason, v1alpha1.ConfirmOffByAnnotation: by}
	}
	poll("edit could set confirm-off", func() bool {
		err := annotate(editor, true, confirm("chassis lost power", personName("editor")))
		return err != nil && strings.Contains(err.Error(), "nodefences/confirm")
	})
	for name, tc := range map[string]struct {
		who         dynamic.ResourceInterface
		annotations map[string]any
		want        string
	}{
		"edit, confirm-off": {editor, confirm("chassis lost power", personName("editor")),
			"setting fencing.kubefence.io/confirm-off needs permission to create nodefences/confirm"},
		"edit, cancel": {editor, map[string]any{v1alpha1.CancelAnnotation: "decommissioned", v1alpha1.CancelByAnnotation: personName("editor")},
			"setting fencing.kubefence.io/cancel needs permission to create nodefences/cancel"},
		"edit, force":                     {editor, map[string]any{v1alpha1.ForceAnnotation: "true"}, "nodefences/force"},
		"on-call, confirm-off without by": {oncall, map[string]any{v1alpha1.ConfirmOffAnnotation: "chassis lost power"}, "set fencing.kubefence.io/confirm-off-by to your user name, " + personName("oncall")},
		"on-call, in another's name":      {oncall, confirm("chassis lost power", personName("editor")), "set fencing.kubefence.io/confirm-off-by to your user name"},
		"on-call, no reason":              {oncall, confirm("", personName("oncall")), "must not be empty"},
		"on-call, cancel in another's name": {oncall, map[string]any{v1alpha1.CancelAnnotation: "gone", v1alpha1.CancelByAnnotation: "alice"},
			"set fencing.kubefence.io/cancel-by to your user name"},
	} {
		err := annotate(tc.who, true, tc.annotations)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: answered %v; want it refused with %q", name, err, tc.want)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
	if err := annotate(editor, false, map[string]any{v1alpha1.RetryAnnotation: "true"}); err != nil {
		t.Errorf("edit could not annotate retry: %v", err)
	}
	if err := annotate(oncall, false, confirm("chassis lost power; BMC dark", personName("oncall"))); err != nil {
		t.Fatalf("on-call's confirm-off refused: %v", err)
	}
	// Once given, the word stands: nobody without the permission changes who gave it.
	if err := annotate(editor, true, map[string]any{v1alpha1.ConfirmOffByAnnotation: personName("editor")}); err == nil ||
		!strings.Contains(err.Error(), "nodefences/confirm") {
		t.Errorf("edit renaming who confirmed answered %v; want it refused", err)
	}
	if err := annotate(oncall, false, map[string]any{v1alpha1.CancelAnnotation: "decommissioned", v1alpha1.CancelByAnnotation: personName("oncall")}); err != nil {
		t.Errorf("on-call's cancel refused: %v", err)
	}
	got, err := viewer.Get(ctx, "incident", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := got.GetAnnotations()
	if a[v1alpha1.ConfirmOffByAnnotation] != personName("oncall") || a[v1alpha1.CancelByAnnotation] != personName("oncall") {
		t.Errorf("annotations %v; want confirm-off and cancel by %s", a, personName("oncall"))
	}
	// A request that carries the word from its creation is held to the same rule.
	withWord := nodeFenceRequest("confirmed-at-birth", "node-2", personName("editor"), false)
	withWord.SetAnnotations(map[string]string{v1alpha1.ConfirmOffAnnotation: "off", v1alpha1.ConfirmOffByAnnotation: personName("editor")})
	if _, err := editor.Create(ctx, withWord, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !strings.Contains(err.Error(), "nodefences/confirm") {
		t.Errorf("edit creating a NodeFence with confirm-off answered %v; want it refused", err)
	}
}

// applyPeopleRoles applies the chart's rendered ClusterRoles for people (view, requester,
// on-call) as cluster admin.
func applyPeopleRoles(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	admin, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, obj := range renderedObjects(t, renderedManifests) {
		name := obj.GetName()
		if obj.GetKind() != "ClusterRole" || (name != "kubefence-view" && name != "kubefence-requester" && name != "kubefence-oncall") {
			continue
		}
		data, _ := obj.MarshalJSON()
		force := true
		gvr := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
		if _, err := admin.Resource(gvr).Patch(ctx, name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "roles-test", Force: &force}); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
		applied++
	}
	if applied != 3 {
		t.Fatalf("rendered manifests hold %d of the people's ClusterRoles, want view, requester and on-call", applied)
	}
}
