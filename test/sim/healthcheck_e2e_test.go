package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// The health checkers' sides of the external remediation contract, played as each
// does it (medik8s node-healthcheck-operator's resources manager; Cluster API's
// MachineHealthCheck controller and its external.GenerateTemplate), under the
// permissions kubefence's chart aggregates into theirs.
const (
	nhcNamespace      = "nhc-system"
	nhcServiceAccount = "node-healthcheck-controller-manager"
	nhcAggregate      = "rbac.ext-remediation/aggregate-to-ext-remediation"
	nhcTemplate       = "kubefence"
	capiNamespace     = "capi-workers"
	capiManager       = "capi-manager"
	capiAggregate     = "cluster.x-k8s.io/aggregate-to-manager"
	capiCluster       = "c1"
)

var (
	nhcGVR     = schema.GroupVersionResource{Group: "remediation.medik8s.io", Version: "v1alpha1", Resource: "nodehealthchecks"}
	machineGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"}
)

// nodeHealthCheckCRD stands in for NodeHealthCheck's own CRD: its requests are owned by
// a NodeHealthCheck object, which must exist for the garbage collector to leave them.
const nodeHealthCheckCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: nodehealthchecks.remediation.medik8s.io
spec:
  group: remediation.medik8s.io
  scope: Cluster
  names: {kind: NodeHealthCheck, listKind: NodeHealthCheckList, plural: nodehealthchecks, singular: nodehealthcheck}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// nhc plays NodeHealthCheck "workers" with its template kubefence in nhc-system.
type nhc struct {
	client dynamic.Interface
	owner  metav1.OwnerReference
}

// healthCheckerHarness is the rendered chart's RBAC and CRDs on an apiserver in
// Node,RBAC mode, and kubefence's configuration as the chart renders it, with detection
// thresholds so long that only a health checker's request opens an incident.
func healthCheckerHarness(t *testing.T, ctx context.Context, tweaks ...func(map[string]any)) (*Harness, string, string) {
	t.Helper()
	docs := renderedObjects(t, renderedManifests)
	h := rbacHarness(t, ctx)
	if err := applyServerSide(ctx, h.Cluster, docs, appliedKinds); err != nil {
		t.Fatal(err)
	}
	tweaks = append([]func(map[string]any){func(cfg map[string]any) {
		cfg["detection"] = map[string]any{"leaseStaleAfter": "10m", "notReadyAfter": "10m"}
	}}, tweaks...)
	return h, serviceAccountKubeconfig(t, ctx, h.Cluster), chartConfig(t, h, docs, tweaks...)
}

// playNHC sets NodeHealthCheck up; with multipleTemplates its template carries
// remediation.medik8s.io/multiple-templates-support and its requests are named with
// generateName.
func playNHC(t *testing.T, ctx context.Context, c *Cluster, multipleTemplates bool) *nhc {
	t.Helper()
	if err := InstallCRDs(ctx, c, [][]byte{[]byte(nodeHealthCheckCRD)}); err != nil {
		t.Fatal(err)
	}
	client, err := CallerClient(ctx, c, nhcNamespace, nhcServiceAccount, nhcAggregate)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	check := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "remediation.medik8s.io/v1alpha1", "kind": "NodeHealthCheck", "metadata": map[string]any{"name": "workers"},
		"spec": map[string]any{"minHealthy": "51%", "remediationTemplate": map[string]any{
			"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "KubefenceRemediationTemplate", "namespace": nhcNamespace, "name": nhcTemplate}},
	}}
	created, err := admin.Resource(nhcGVR).Create(ctx, check, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The template is the cluster admin's, as NodeHealthCheck's documentation has it.
	var annotations map[string]string
	if multipleTemplates {
		annotations = map[string]string{v1alpha1.MultipleTemplatesAnnotation: "true"}
	}
	createTemplate(t, ctx, admin, nhcNamespace, annotations, map[string]any{"spec": map[string]any{"action": "Off"}})
	return &nhc{client: client, owner: metav1.OwnerReference{APIVersion: "remediation.medik8s.io/v1alpha1", Kind: "NodeHealthCheck",
		Name: "workers", UID: created.GetUID(), Controller: new(bool)}}
}

func createTemplate(t *testing.T, ctx context.Context, admin dynamic.Interface, ns string, annotations map[string]string, template map[string]any) {
	t.Helper()
	tmpl := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "KubefenceRemediationTemplate",
		"metadata": map[string]any{"namespace": ns, "name": nhcTemplate},
		"spec":     map[string]any{"template": template},
	}}
	tmpl.SetAnnotations(annotations)
	if _, err := admin.Resource(v1alpha1.RemediationTemplateResource).Namespace(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// remediate creates the request for node from the template, as NodeHealthCheck does:
// kind without "Template", in the template's namespace, named after the node (or
// generateName <node>- when the template carries the multiple-templates annotation),
// spec from spec.template.spec, its two annotations and its label, owned by the
// NodeHealthCheck.
func (n *nhc) remediate(t *testing.T, ctx context.Context, node string) *unstructured.Unstructured {
	t.Helper()
	tmpl, err := n.client.Resource(v1alpha1.RemediationTemplateResource).Namespace(nhcNamespace).Get(ctx, nhcTemplate, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("NodeHealthCheck reads its template: %v", err)
	}
	spec, _, _ := unstructured.NestedMap(tmpl.Object, "spec", "template", "spec")
	cr := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	cr.SetAPIVersion(tmpl.GetAPIVersion())
	cr.SetKind(strings.TrimSuffix(tmpl.GetKind(), "Template"))
	cr.SetNamespace(tmpl.GetNamespace())
	if _, ok := tmpl.GetAnnotations()[v1alpha1.MultipleTemplatesAnnotation]; ok {
		cr.SetGenerateName(node + "-")
	} else {
		cr.SetName(node)
	}
	cr.SetAnnotations(map[string]string{v1alpha1.RemediationNodeNameAnnotation: node, v1alpha1.RemediationTemplateNameAnnotation: tmpl.GetName()})
	cr.SetLabels(map[string]string{"app.kubernetes.io/part-of": "node-healthcheck-controller"})
	cr.SetOwnerReferences([]metav1.OwnerReference{n.owner})
	created, err := n.client.Resource(v1alpha1.RemediationResource).Namespace(nhcNamespace).Create(ctx, cr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("NodeHealthCheck creates its request: %v", err)
	}
	return created
}

// timeOut annotates the request as NodeHealthCheck does when its escalation timeout
// expires: an Update with the time, RFC 3339.
func (n *nhc) timeOut(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	cr, err := n.client.Resource(v1alpha1.RemediationResource).Namespace(nhcNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ann := cr.GetAnnotations()
	ann[v1alpha1.RemediationTimedOutAnnotation] = time.Now().UTC().Format(time.RFC3339)
	cr.SetAnnotations(ann)
	if _, err := n.client.Resource(v1alpha1.RemediationResource).Namespace(nhcNamespace).Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("NodeHealthCheck annotates its timeout: %v", err)
	}
}

// condition is what a health checker reads of a request's condition typ: its status
// and reason, "" when the condition is not there.
func condition(ctx context.Context, client dynamic.Interface, ns, name, typ string) (string, string, error) {
	cr, err := client.Resource(v1alpha1.RemediationResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	kr := &v1alpha1.KubefenceRemediation{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cr.Object, kr); err != nil {
		return "", "", err
	}
	c := meta.FindStatusCondition(kr.Status.Conditions, typ)
	if c == nil {
		return "", "", nil
	}
	return string(c.Status), c.Reason, nil
}

// waitCondition polls, as the caller, until the request's condition typ has status.
func waitCondition(t *testing.T, ctx context.Context, client dynamic.Interface, ns, name, typ, status string) string {
	t.Helper()
	var got, reason string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		got, reason, err = condition(ctx, client, ns, name, typ)
		return err == nil && got == status, nil
	})
	if err != nil {
		t.Fatalf("request %s/%s: %s=%q (%s), want %s: %v", ns, name, typ, got, reason, status, err)
	}
	return reason
}

// waitNodeReady polls until node's Ready condition has status, as a health checker's
// unhealthy condition (Ready Unknown) or its healthy check reads it.
func waitNodeReady(t *testing.T, ctx context.Context, c *Cluster, node string, status corev1.ConditionStatus) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == status, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("node %s never Ready=%s: %v", node, status, err)
	}
}

// requestIncident is the one incident of node, which must carry the caller's request.
func requestIncident(t *testing.T, ctx context.Context, c *Cluster, node, caller string) v1alpha1.NodeFence {
	t.Helper()
	incs, err := Incidents(ctx, c, node)
	if err != nil || len(incs) != 1 {
		t.Fatalf("incidents of %s: %d (%v), want the one the request opened", node, len(incs), err)
	}
	if want := v1alpha1.RequestedByRemediationPrefix + caller; !strings.HasPrefix(incs[0].Spec.RequestedBy, want) {
		t.Errorf("incident %s requested by %q, want %q...", incs[0].Name, incs[0].Spec.RequestedBy, want)
	}
	return incs[0]
}

// TestNodeHealthCheckContract plays NodeHealthCheck against kubefence run as the chart
// installs it: NHC sees the node's Ready turn Unknown and creates its request from the
// template, under only the ClusterRole the chart aggregates into NHC's; kubefence fences
// the node (ipmi_sim logs the power-off), releases its pod, and says Succeeded; the node
// is powered on, boots anew, and recovers; NHC deletes its request once the node is
// healthy, and the incident stays on record.
func TestNodeHealthCheckContract(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h, kubeconfig, cfgPath := healthCheckerHarness(t, ctx)
	c := h.Cluster
	checker := playNHC(t, ctx, c, false)
	victim := deployWeb(t, ctx, c)
	startLeader(t, ctx, h, "controller-nhc", "--config", cfgPath, "--kubeconfig", kubeconfig)

	c.Node(victim).Crash()
	waitNodeReady(t, ctx, c, victim, corev1.ConditionUnknown)
	checker.remediate(t, ctx, victim)
	if st, _, err := condition(ctx, checker.client, nhcNamespace, victim, v1alpha1.ConditionPermanentNodeDeletionExpected); err != nil || st == "True" {
		t.Errorf("PermanentNodeDeletionExpected=%q (%v): kubefence never deletes the node", st, err)
	}
	reason := waitCondition(t, ctx, checker.client, nhcNamespace, victim, v1alpha1.ConditionSucceeded, "True")
	nf := requestIncident(t, ctx, c, victim, "NodeHealthCheck workers")
	if nf.Status.Phase != v1alpha1.PhaseRemediated || nf.Status.VerifiedLevel != 1 {
		t.Errorf("Succeeded=True (%s) with incident %s %s at level %d, want Remediated, verified at level 1", reason, nf.Name, nf.Status.Phase, nf.Status.VerifiedLevel)
	}
	if on, err := h.BMCs[victim].PoweredOn(); err != nil || on {
		t.Errorf("BMC of %s: powered on = %t (%v), want off", victim, on, err)
	}
	if st, _, _ := condition(ctx, checker.client, nhcNamespace, victim, v1alpha1.ConditionProcessing); st != "False" {
		t.Errorf("Processing=%q once Succeeded, want False", st)
	}
	waitReleased(t, ctx, h, victim)

	powerOn(t, ctx, h, victim)
	if final, err := waitOnlyIncident(ctx, h, victim, recovered); err != nil {
		t.Fatalf("incident not recovered after the power cycle: phase %s: %v", final.Status.Phase, err)
	}
	waitNodeReady(t, ctx, c, victim, corev1.ConditionTrue)
	// Healthy again: NodeHealthCheck deletes its request, and only it does.
	if err := checker.client.Resource(v1alpha1.RemediationResource).Namespace(nhcNamespace).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("NodeHealthCheck deletes its request: %v", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := checker.client.Resource(v1alpha1.RemediationResource).Namespace(nhcNamespace).Get(ctx, victim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("request still there after NodeHealthCheck deleted it (a finalizer?): %v", err)
	}
	if final := requestIncident(t, ctx, c, victim, "NodeHealthCheck workers"); final.Status.Phase != v1alpha1.PhaseRecovered {
		t.Errorf("incident %s after the request was deleted: %s, want Recovered", final.Name, final.Status.Phase)
	}
}

// TestNodeHealthCheckTimeout: NodeHealthCheck's escalation timeout stops kubefence before
// it fences (the incident waits on kubefence's budget: fencing is paused here): the
// incident is cancelled, no agent is called, and the request says Succeeded=False with
// reason TimedOut, so that NHC moves on to its next remediator. A request created with
// generateName (a template with multiple-templates-support) is carried the same way.
func TestNodeHealthCheckTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h, kubeconfig, cfgPath := healthCheckerHarness(t, ctx, func(cfg map[string]any) { cfg["paused"] = true })
	c := h.Cluster
	checker := playNHC(t, ctx, c, true)
	victim := deployWeb(t, ctx, c)
	startLeader(t, ctx, h, "controller-nhc", "--config", cfgPath, "--kubeconfig", kubeconfig)

	c.Node(victim).Crash()
	waitNodeReady(t, ctx, c, victim, corev1.ConditionUnknown)
	cr := checker.remediate(t, ctx, victim)
	if !strings.HasPrefix(cr.GetName(), victim+"-") {
		t.Fatalf("request %s, want one named with generateName %s-", cr.GetName(), victim)
	}
	waitCondition(t, ctx, checker.client, nhcNamespace, cr.GetName(), v1alpha1.ConditionProcessing, "True")
	nf, err := waitOnlyIncident(ctx, h, victim, func(nf v1alpha1.NodeFence) bool { return nf.Status.Phase == v1alpha1.PhaseHeld })
	if err != nil {
		t.Fatalf("incident not held while fencing is paused: %s: %v", nf.Status.Phase, err)
	}
	checker.timeOut(t, ctx, cr.GetName())
	if reason := waitCondition(t, ctx, checker.client, nhcNamespace, cr.GetName(), v1alpha1.ConditionSucceeded, "False"); reason != "TimedOut" {
		t.Errorf("Succeeded=False with reason %s, want TimedOut", reason)
	}
	final := requestIncident(t, ctx, c, victim, "NodeHealthCheck workers")
	if final.Status.Phase != v1alpha1.PhaseCancelled || len(final.Status.Attempts) != 0 {
		t.Errorf("incident %s %s with %d attempts after the timeout, want Cancelled with none", final.Name, final.Status.Phase, len(final.Status.Attempts))
	}
	if on, err := h.BMCs[victim].PoweredOn(); err != nil || !on {
		t.Errorf("BMC of %s: powered on = %t (%v), want on: nothing was to be fenced", victim, on, err)
	}
	if st, _, _ := condition(ctx, checker.client, nhcNamespace, cr.GetName(), v1alpha1.ConditionProcessing); st != "False" {
		t.Errorf("Processing=%q after the timeout, want False", st)
	}
}

// machineHealthCheck plays Cluster API: its CRDs, a Cluster and a Machine m-1 whose
// status.nodeRef names node, and the manager's identity under the aggregated role.
func machineHealthCheck(t *testing.T, ctx context.Context, c *Cluster, node string) (dynamic.Interface, *unstructured.Unstructured) {
	t.Helper()
	crds, err := CachedCRDs("cluster-api-"+ClusterAPIVersion, "cluster.x-k8s.io_machines.yaml", "cluster.x-k8s.io_clusters.yaml",
		"cluster.x-k8s.io_machinehealthchecks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := InstallCRDs(ctx, c, crds); err != nil {
		t.Fatal(err)
	}
	client, err := CallerClient(ctx, c, capiNamespace, capiManager, capiAggregate)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"namespace": capiNamespace, "name": "m-1", "labels": map[string]any{"cluster.x-k8s.io/cluster-name": capiCluster, "pool": "workers"}},
		"spec": map[string]any{"clusterName": capiCluster, "bootstrap": map[string]any{"dataSecretName": "m-1-bootstrap"},
			"infrastructureRef": map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "SimMachine", "name": "m-1"}},
	}}
	created, err := admin.Resource(machineGVR).Namespace(capiNamespace).Create(ctx, m, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = map[string]any{"nodeRef": map[string]any{"name": node}}
	if created, err = admin.Resource(machineGVR).Namespace(capiNamespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	createTemplate(t, ctx, admin, capiNamespace, nil, map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"team": "storage"}}, "spec": map[string]any{}})
	return client, created
}

// remediateMachine creates the request for a Machine as Cluster API's MachineHealthCheck
// does: the template's spec.template (metadata and spec), kind without "Template", named
// after the Machine in its namespace, owned by it, with the cloned-from annotations and
// the cluster-name label.
func remediateMachine(t *testing.T, ctx context.Context, client dynamic.Interface, m *unstructured.Unstructured) {
	t.Helper()
	tmpl, err := client.Resource(v1alpha1.RemediationTemplateResource).Namespace(capiNamespace).Get(ctx, nhcTemplate, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("MachineHealthCheck reads its template: %v", err)
	}
	body, _, _ := unstructured.NestedMap(tmpl.Object, "spec", "template")
	cr := &unstructured.Unstructured{Object: body}
	cr.SetAPIVersion(tmpl.GetAPIVersion())
	cr.SetKind(strings.TrimSuffix(tmpl.GetKind(), "Template"))
	cr.SetNamespace(m.GetNamespace())
	cr.SetName(m.GetName())
	labels := cr.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels["cluster.x-k8s.io/cluster-name"] = capiCluster
	cr.SetLabels(labels)
	cr.SetAnnotations(map[string]string{"cluster.x-k8s.io/cloned-from-name": tmpl.GetName(),
		"cluster.x-k8s.io/cloned-from-groupkind": "KubefenceRemediationTemplate." + v1alpha1.GroupName})
	cr.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: m.GetName(), UID: m.GetUID()}})
	created, err := client.Resource(v1alpha1.RemediationResource).Namespace(capiNamespace).Create(ctx, cr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("MachineHealthCheck creates its request: %v", err)
	}
	if created.GetLabels()["team"] != "storage" {
		t.Errorf("request labels %v: the template's spec.template.metadata was not kept", created.GetLabels())
	}
}

// TestMachineHealthCheckContract plays Cluster API's MachineHealthCheck: a request named
// after the Machine, which names no node; kubefence finds the node through the Machine's
// status.nodeRef (its ClusterRole may get Machines), fences it, and recovers it after a
// power cycle. MachineHealthCheck reads no status; it deletes its request once the
// Machine is healthy, under only the ClusterRole the chart aggregates into Cluster
// API's manager role.
func TestMachineHealthCheckContract(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h, kubeconfig, cfgPath := healthCheckerHarness(t, ctx)
	c := h.Cluster
	victim := deployWeb(t, ctx, c)
	client, m := machineHealthCheck(t, ctx, c, victim)
	startLeader(t, ctx, h, "controller-mhc", "--config", cfgPath, "--kubeconfig", kubeconfig)

	c.Node(victim).Crash()
	waitNodeReady(t, ctx, c, victim, corev1.ConditionUnknown)
	remediateMachine(t, ctx, client, m)
	nf := waitReleased(t, ctx, h, victim)
	requestIncident(t, ctx, c, victim, fmt.Sprintf("MachineHealthCheck of Machine %s/%s", capiNamespace, m.GetName()))
	if nf.Status.VerifiedLevel != 1 {
		t.Errorf("incident %s verified at level %d, want 1", nf.Name, nf.Status.VerifiedLevel)
	}
	if on, err := h.BMCs[victim].PoweredOn(); err != nil || on {
		t.Errorf("BMC of %s: powered on = %t (%v), want off", victim, on, err)
	}
	// kubefence's status, for people: MachineHealthCheck itself reads none of it. The
	// request's status follows the incident's, written after it: poll, do not read once.
	waitCondition(t, ctx, client, capiNamespace, m.GetName(), v1alpha1.ConditionSucceeded, "True")
	powerOn(t, ctx, h, victim)
	if final, err := waitOnlyIncident(ctx, h, victim, recovered); err != nil {
		t.Fatalf("incident not recovered after the power cycle: phase %s: %v", final.Status.Phase, err)
	}
	waitNodeReady(t, ctx, c, victim, corev1.ConditionTrue)
	if err := client.Resource(v1alpha1.RemediationResource).Namespace(capiNamespace).Delete(ctx, m.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatalf("MachineHealthCheck deletes its request: %v", err)
	}
	if final := requestIncident(t, ctx, c, victim, "MachineHealthCheck of Machine"); final.Status.Phase != v1alpha1.PhaseRecovered {
		t.Errorf("incident %s after the request was deleted: %s, want Recovered", final.Name, final.Status.Phase)
	}
}
