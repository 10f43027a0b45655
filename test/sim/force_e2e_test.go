package sim

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// personClient returns a dynamic client for a new ServiceAccount bound to a ClusterRole
// with the given rules: a person with those permissions.
func personClient(t *testing.T, ctx context.Context, c *Cluster, name string, rules []rbacv1.PolicyRule) dynamic.Interface {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-" + name}, Rules: rules}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return personWithRole(t, ctx, c, name, role.Name)
}

// personWithRole returns a dynamic client for a new ServiceAccount bound cluster-wide to
// the existing ClusterRole role.
func personWithRole(t *testing.T, ctx context.Context, c *Cluster, name, role string) dynamic.Interface {
	t.Helper()
	cs := c.Client
	if _, err := cs.CoreV1().ServiceAccounts(Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-" + name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: Namespace}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc := &rest.Config{Host: c.Config.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: c.Config.CAData}}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// personName is the user name of personClient's person.
func personName(name string) string { return "system:serviceaccount:" + Namespace + ":" + name }

func nodeFenceRequest(name, node, requestedBy string, force bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "NodeFence",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"nodeName": node, "requestedBy": requestedBy, "reason": "test"},
	}}
	if force {
		u.SetAnnotations(map[string]string{v1alpha1.ForceAnnotation: "true"})
	}
	return u
}

// TestForceNeedsPermission: the chart's ValidatingAdmissionPolicy lets only a person who
// may create nodefences/force set the force annotation.
func TestForceNeedsPermission(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := rbacHarness(t, ctx)
	c := h.Cluster
	applyAdmissionPolicies(t, ctx, c)
	create := rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"nodefences"}, Verbs: []string{"create", "update", "get"}}
	forceRule := rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"nodefences/force"}, Verbs: []string{"create"}}
	operator := personClient(t, ctx, c, "operator", []rbacv1.PolicyRule{create})
	oncall := personClient(t, ctx, c, "oncall", []rbacv1.PolicyRule{create, forceRule})
	nodefences := func(d dynamic.Interface) dynamic.ResourceInterface { return d.Resource(v1alpha1.NodeFenceResource) }

	// The policy takes a moment to be loaded by the API server: poll until it denies.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := nodefences(operator).Create(ctx, nodeFenceRequest("forced-by-operator", "node-1", personName("operator"), true), metav1.CreateOptions{DryRun: []string{"All"}})
		return err != nil && strings.Contains(err.Error(), "nodefences/force"), nil
	})
	if err != nil {
		_, cerr := nodefences(operator).Create(ctx, nodeFenceRequest("forced-by-operator", "node-1", personName("operator"), true), metav1.CreateOptions{DryRun: []string{"All"}})
		t.Fatalf("an operator without nodefences/force could set the force annotation (last answer: %v)", cerr)
	}
	if _, err := nodefences(operator).Create(ctx, nodeFenceRequest("plain", "node-1", personName("operator"), false), metav1.CreateOptions{DryRun: []string{"All"}}); err != nil {
		t.Errorf("operator's plain request refused: %v", err)
	}
	if _, err := nodefences(oncall).Create(ctx, nodeFenceRequest("forced-by-oncall", "node-1", personName("oncall"), true), metav1.CreateOptions{DryRun: []string{"All"}}); err != nil {
		t.Errorf("on-call's forced request refused: %v", err)
	}
}

// TestForceOverridesStormHold: two of three nodes die, so the storm rule holds both; a
// person forces one incident and only that node is fenced.
func TestForceOverridesStormHold(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, nil)
	c := h.Cluster
	startLeader(t, ctx, h, "controller")
	c.Node("node-2").Crash()
	c.Node("node-3").Crash()
	held := func(node string) *v1alpha1.NodeFence {
		var nf *v1alpha1.NodeFence
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			incs, err := Incidents(ctx, c, node)
			if err != nil || len(incs) != 1 || incs[0].Status.Phase != v1alpha1.PhaseHeld {
				return false, nil
			}
			nf = &incs[0]
			return true, nil
		})
		if err != nil {
			t.Fatalf("incident of %s never Held by the storm rule", node)
		}
		return nf
	}
	nf2, _ := held("node-2"), held("node-3")
	dyn, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.ForceAnnotation + `":"true"}}}`)
	if _, err := dyn.Resource(v1alpha1.NodeFenceResource).Patch(ctx, nf2.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, c, "node-2")
		return err == nil && len(incs) == 1 && incs[0].Status.Phase == v1alpha1.PhaseRemediated, nil
	})
	if err != nil {
		t.Fatalf("forced incident of node-2 not remediated")
	}
	incs, err := Incidents(ctx, c, "node-3")
	if err != nil || len(incs) != 1 || incs[0].Status.Phase != v1alpha1.PhaseHeld {
		t.Errorf("node-3's incident left Held? %+v (%v)", incs, err)
	}
	if ev, _ := h.BMCs["node-3"].Events(); len(ev) != 0 {
		t.Errorf("node-3's BMC was touched: %+v", ev)
	}
}

func admissionGVR(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: resource}
}

// applyAdmissionPolicies applies the chart's ValidatingAdmissionPolicies and their
// bindings, from the rendered manifests, as cluster admin; those whose names contain
// one of skip are left out (a controller that runs as cluster admin, not as the chart's
// ServiceAccount, needs no requestedBy policy in its way).
func applyAdmissionPolicies(t *testing.T, ctx context.Context, c *Cluster, skip ...string) {
	t.Helper()
	var policies []*unstructured.Unstructured
	skipped := 0
	for _, obj := range renderedObjects(t, renderedManifests) {
		if !strings.HasPrefix(obj.GetKind(), "ValidatingAdmissionPolicy") {
			continue
		}
		if slices.ContainsFunc(skip, func(s string) bool { return strings.Contains(obj.GetName(), s) }) {
			skipped++
			continue
		}
		policies = append(policies, obj)
	}
	if len(policies)+skipped != 8 {
		t.Fatalf("rendered manifests hold %d ValidatingAdmissionPolicy objects, want four policies (force, confirm-off, cancel, requestedBy) and their bindings", len(policies))
	}
	admin, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	plural := map[string]string{"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
		"ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		for _, obj := range policies {
			if obj.GetKind() != kind {
				continue
			}
			data, _ := obj.MarshalJSON()
			force := true
			_, err := admin.Resource(admissionGVR(plural[kind])).Patch(ctx, obj.GetName(), types.ApplyPatchType, data,
				metav1.PatchOptions{FieldManager: "force-test", Force: &force})
			if err != nil {
				t.Fatalf("apply %s: %v", obj.GetName(), err)
			}
		}
	}
}
