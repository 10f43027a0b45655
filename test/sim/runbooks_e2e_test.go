package sim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/nodeagent"
)

// The placeholders of docs/runbooks.md, and what the test puts in their place.
const (
	runbookIncident  = "runbook-incident"
	runbookNode      = "node-1"
	runbookNamespace = "fencing-dc2"
	runbookAgent     = "ipmi-dc2"
	// A node gone for good and its open incident.
	runbookGoneNode     = "node-3"
	runbookGoneIncident = "runbook-gone"
	// runbookWatchdogStopped is why the report of runbookNode's agent says its watchdog
	// is not armed.
	runbookWatchdogStopped = "open /dev/watchdog: device or resource busy"
	// runbookPerson is the person on call the runbooks grant kubectl fence's explain and
	// check to.
	runbookPerson = "jane@example.com"
)

// TestRunbookCommands runs every command of docs/runbooks.md, block by block as an
// operator pastes them, with kubectl v1.36 and kubectl fence, against the simulated
// cluster (real kube-apiserver) with a leading controller, an incident, a node the target
// monitor marked and a remote agent's Deployment: every command must succeed, and the
// leader's log must come from the leader. A command mentioned in the text and missing from
// the blocks fails the test too.
func TestRunbookCommands(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kubectl := kubectlBinary(t)
	plugin := kubectlFenceBinary(t, ctx)
	blocks := runbookBlocks(t)
	h := fastHarnessWith(t, ctx, HarnessOptions{
		// The API server reaches the simulated kubelets on loopback for kubectl logs.
		Cluster: func(o *Options) {
			o.APIServerArgs = append(o.APIServerArgs, "--kubelet-preferred-address-types=InternalIP")
		},
		// Decisions only: the commands change annotations and labels, nothing is fenced.
		Config: func(c *v1alpha1.Config) { c.DryRun = true },
	})
	c := h.Cluster
	r := startLeader(t, ctx, h, "controller")
	leader, err := h.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaderPod, _, _ := strings.Cut(leader, "_")
	runbookState(t, ctx, h, leaderPod, r)

	env := append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "HOME="+t.TempDir(),
		"PATH="+strings.Join([]string{filepath.Dir(kubectl), filepath.Dir(plugin), h.bin, os.Getenv("PATH")}, string(os.PathListSeparator)))
	values := map[string]string{"NAMESPACE": runbookNamespace, "NAME": runbookIncident, "NODE": runbookNode,
		"PERSON": runbookPerson, "AGENT": runbookAgent, "OLDNODE": runbookGoneNode, "OLDNAME": runbookGoneIncident}
	var all strings.Builder
	for i, block := range blocks {
		script := RunbookPlaceholder.ReplaceAllStringFunc(withoutExec(block), func(p string) string { return values[p] })
		script = RunbookWatch.ReplaceAllString(script, "timeout 3 $1 || test $$? -eq 124$2")
		cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
		cmd.Env = env
		// A command bash started that outlives it (a watch) must not hold its output open.
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("block %d failed: %v\n%s\noutput:\n%s", i+1, err, script, out)
		}
		t.Logf("block %d:\n%s\n%s", i+1, script, out)
		all.Write(out)
	}
	for _, want := range []string{
		"MESSAGE",                              // kubectl get nodefences -o wide
		"Caches synced",                        // the leader's own log, through the API server and its kubelet
		leader,                                 // the Lease's holder
		"kubefence-agent-" + runbookAgent,      // describe deploy
		"partition under investigation",        // the pause requests listed
		runbookWatchdogStopped,                 // the node agent's report
		"pod " + leaderPod + " on node node-2", // kubectl fence status, through kubectl's plugin lookup
	} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("the runbook commands printed no %q", want)
		}
	}
	checkRunbookEffects(t, ctx, c)
}

// execCommands are the runbooks' commands that exec in the leader's pod: the simulated
// kubelets run no containers. pkg/kubectlfence's tests cover the pod and the command.
var execCommands = regexp.MustCompile(`(?m)^kubectl fence (explain|check)\b.*$`)

// withoutExec is block without the commands that exec in the leader's pod.
func withoutExec(block string) string { return execCommands.ReplaceAllString(block, "") }

// runbookState makes what the runbooks look at: the leader's pod (its log served by a
// node's kubelet), an incident, the target monitor's mark and a remote agent.
func runbookState(t *testing.T, ctx context.Context, h *Harness, leaderPod string, r *Replica) {
	t.Helper()
	cs := h.Cluster.Client
	ns := ControllerNamespace
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: leaderPod, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: "node-2", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "controller", Image: "kubefence/kubefence"}}}}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the leader's pod %q (the Lease holder's host name): %v", leaderPod, err)
	}
	h.Cluster.Node("node-2").ServeContainerLog(ns, leaderPod, "controller", r.Log)
	admin, err := dynamicClient(h.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	for name, node := range map[string]string{runbookIncident: runbookNode, runbookGoneIncident: runbookGoneNode} {
		if _, err := admin.Resource(v1alpha1.NodeFenceResource).Create(ctx,
			nodeFenceRequest(name, node, "admin", false), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The chart's pause ConfigMap, with no request in it.
	pause := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-pause", Namespace: ns,
		Labels: map[string]string{v1alpha1.PauseLabel: "true"}}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, pause, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The incidents are held (dry run) before the runbooks look at them.
	for _, node := range []string{runbookNode, runbookGoneNode} {
		waitIncident(t, ctx, h.Cluster, node, "Held", func(nf *v1alpha1.NodeFence) bool { return nf.Status.Phase == v1alpha1.PhaseHeld })
	}
	mark := `{"metadata":{"annotations":{"` + v1alpha1.TargetReadsOffAnnotation + `":"agent ipmi, target 127.0.0.1"}}}`
	if _, err := cs.CoreV1().Nodes().Patch(ctx, runbookNode, types.MergePatchType, []byte(mark), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: runbookNamespace}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The report of a node agent whose watchdog device is not armed (the node-agent alerts).
	report := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeagent.LeaseName(runbookNode), Namespace: ns}}
	if err := (nodeagent.Report{BootID: "boot-1", Isolation: "10s", ReportInterval: "30s",
		Watchdog: nodeagent.WatchdogReport{Kind: "device", Stopped: runbookWatchdogStopped}}).Encode(report, runbookNode); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoordinationV1().Leases(ns).Create(ctx, report, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app.kubernetes.io/name": "kubefence-agent", "app.kubernetes.io/instance": runbookAgent}
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-agent-" + runbookAgent, Namespace: runbookNamespace},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "kubefence/kubefence"}}}}}}
	if _, err := cs.AppsV1().Deployments(runbookNamespace).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkRunbookEffects: the commands did what the runbooks say they do.
func checkRunbookEffects(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	node, err := c.Client.CoreV1().Nodes().Get(ctx, runbookNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !node.Spec.Unschedulable || node.Labels[v1alpha1.DefaultExcludeLabel] != "true" {
		t.Errorf("%s: unschedulable %v, labels %v; want cordoned and excluded", runbookNode, node.Spec.Unschedulable, node.Labels)
	}
	if _, marked := node.Annotations[v1alpha1.TargetReadsOffAnnotation]; marked {
		t.Errorf("%s still carries the target monitor's mark", runbookNode)
	}
	for _, taint := range node.Spec.Taints {
		if taint.Key == "node.kubernetes.io/out-of-service" {
			t.Errorf("%s kept the out-of-service taint the runbook removes", runbookNode)
		}
	}
	admin, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	nf, err := admin.Resource(v1alpha1.NodeFenceResource).Get(ctx, runbookIncident, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := nf.GetAnnotations(); a[v1alpha1.RetryAnnotation] != "true" || a[v1alpha1.ForceAnnotation] != "true" {
		t.Errorf("incident annotations %v; want retry and force", a)
	}
	// The words: confirm-off refused (the node renews), then the cancel ends the held
	// incident; the gone node's incident closes as decommissioned.
	var words *v1alpha1.NodeFence
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, c, runbookNode)
		for i := range incs {
			if err == nil && incs[i].Name == runbookIncident && incs[i].Status.Phase == v1alpha1.PhaseCancelled {
				words = &incs[i]
			}
		}
		return words != nil, nil
	})
	if err != nil {
		t.Fatalf("the runbook's cancel never ended %s", runbookIncident)
	}
	if !hasStep(words, v1alpha1.StepWordRefused, "is alive") || words.Status.Verified() {
		t.Errorf("the runbook's confirm-off of live %s was not refused: %+v", runbookNode, words.Status.Timeline)
	}
	waitIncident(t, ctx, c, runbookGoneNode, "closed as decommissioned", func(nf *v1alpha1.NodeFence) bool {
		return nf.Status.Phase == v1alpha1.PhaseRecovered && hasStep(nf, v1alpha1.StepDecommissioned, runbookGoneNode+" decommissioned")
	})
	if _, err := c.Client.CoreV1().Nodes().Get(ctx, runbookGoneNode, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s still there after the runbook deleted it: %v", runbookGoneNode, err)
	}
	list, err := admin.Resource(v1alpha1.NodeFenceResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The runbook's request, once with kubectl fence and once with kubectl, both in the
	// kubeconfig's user name.
	requested, requestedBy := 0, map[string]bool{}
	for _, item := range list.Items {
		if strings.HasPrefix(item.GetName(), runbookNode+"-") {
			by, _, _ := unstructured.NestedString(item.Object, "spec", "requestedBy")
			requestedBy[by] = true
			requested++
		}
	}
	if requested != 2 || len(requestedBy) != 1 || requestedBy[""] {
		t.Errorf("%d NodeFences requested by hand for %s by %v, want the runbook's two, by one user", requested, runbookNode, requestedBy)
	}
}

// runbookBlocks returns the sh blocks of docs/runbooks.md, dedented, and fails when the
// text names a kubectl or fence-controller command that no block runs.
func runbookBlocks(t *testing.T) []string {
	t.Helper()
	r, err := ReadRunbooks()
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range r.Untold {
		t.Errorf("docs/runbooks.md tells of `%s`, which no sh block runs", cmd)
	}
	return r.Blocks
}

// kubectlBinary is the kubectl hack/controlplane.sh builds beside the control plane.
func kubectlBinary(t *testing.T) string {
	t.Helper()
	b, err := findBinaries("", "")
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(filepath.Dir(b.apiserver), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("%v: run hack/controlplane.sh (or make deps), which builds kubectl with the control plane", err)
	}
	return kubectl
}
