package sim

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

// The node agent's objects in deploy/manifests/node-agent.yaml.
const renderedNodeAgentSA = "kubefence-node-agent"

var nodeAgentKinds = map[string]bool{
	"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

// agentNode is one node's agent in the test: its process, its emulated watchdog (which
// crashes the node when it expires, as a reset would), and a client with its identity.
type agentNode struct {
	name    string
	token   string
	health  string // host:port of /healthz and /metrics
	proc    *process
	emu     *watchdog.Emulator
	expired atomic.Bool
	client  kubernetes.Interface
	fencing versioned.Interface
}

// TestNodeAgentUnderRenderedRBAC runs a node agent on each of three nodes with the
// identity the chart gives it (a token bound to a pod on the node, the rendered RBAC
// and admission policy, on an apiserver in Node,RBAC mode), each feeding an emulated
// watchdog. It checks their reports, that a NodeFence past its budget is held by every
// agent and resets only its own node, and what an agent may not do.
func TestNodeAgentUnderRenderedRBAC(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h := rbacHarness(t, ctx)
	c := h.Cluster
	if err := applyServerSide(ctx, c, renderedObjects(t, renderedManifests), appliedKinds); err != nil {
		t.Fatal(err)
	}
	if err := applyServerSide(ctx, c, renderedObjects(t, renderedAgentManifest), nodeAgentKinds); err != nil {
		t.Fatal(err)
	}
	bin := buildNodeAgent(t, ctx)
	var names []string
	for _, n := range c.Nodes() {
		names = append(names, n.Name())
	}
	agents := map[string]*agentNode{}
	for _, n := range c.Nodes() {
		agents[n.Name()] = startNodeAgent(t, ctx, h, bin, n)
	}

	// Every agent reports its boot, the member list, and an armed watchdog.
	members := nodeagent.MembersOf(names)
	for _, n := range c.Nodes() {
		r := waitReport(t, ctx, c, n.Name(), "an armed watchdog", func(r nodeagent.Report) bool { return r.Watchdog.Armed })
		if r.BootID != n.BootID() || r.Members != members || r.WatchdogTimeout() != 3*time.Second || r.IsolationLimit() != 3*time.Second || len(r.Holds) != 0 ||
			r.Watchdog.Kind != watchdog.KindEmulated || r.Every() != 2*time.Second {
			t.Errorf("report of %s: %+v; want boot %s, members %+v, an emulated watchdog at 3s, isolation 3s, reports every 2s, no holds", n.Name(), r, n.BootID(), members)
		}
	}

	t.Run("refused", func(t *testing.T) { checkNodeAgentRefused(t, ctx, c, agents[names[1]], names) })

	// A NodeFence past its budget for the first node: every agent holds it, and only
	// that node's watchdog resets it.
	victim := names[0]
	admin := versioned.NewForConfigOrDie(c.Config)
	nf, err := admin.FencingV1alpha1().NodeFences().Create(ctx, &v1alpha1.NodeFence{
		ObjectMeta: metav1.ObjectMeta{GenerateName: victim + "-"},
		Spec:       v1alpha1.NodeFenceSpec{NodeName: victim, Reason: "node agent e2e", RequestedBy: "test"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nf.Status.Phase = v1alpha1.PhaseFencing
	if _, err := admin.FencingV1alpha1().NodeFences().UpdateStatus(ctx, nf, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range names[1:] {
		waitReport(t, ctx, c, name, "it holds "+nf.Name, func(r nodeagent.Report) bool { return slices.Equal(r.Holds, []string{nf.Name}) })
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return agents[victim].expired.Load(), nil
	}); err != nil {
		t.Fatalf("the watchdog of %s did not reset it after its NodeFence reached Fencing", victim)
	}
	// Its last report says why it stopped feeding.
	r := waitReport(t, ctx, c, victim, "feeding stopped", func(r nodeagent.Report) bool { return r.Watchdog.Stopped != "" })
	if !strings.Contains(r.Watchdog.Stopped, "wants node "+victim+" fenced") {
		t.Errorf("report of %s says it stopped for %q", victim, r.Watchdog.Stopped)
	}
	// The others keep feeding through three more timeouts of theirs.
	survivors := agents[names[1]].emu.Expiries() + agents[names[2]].emu.Expiries()
	for _, name := range names[1:] {
		before := readLease(t, ctx, c, name).Spec.RenewTime
		waitReport(t, ctx, c, name, "renewed after the reset", func(nodeagent.Report) bool {
			l := readLease(t, ctx, c, name)
			return l.Spec.RenewTime.Sub(before.Time) >= 9*time.Second
		})
	}
	if survivors != 0 || agents[names[1]].expired.Load() || agents[names[2]].expired.Load() {
		t.Errorf("a watchdog of a node the cluster does not want fenced expired (%d expiries before the fence)", survivors)
	}
	for name, a := range agents {
		if strings.Contains(strings.ToLower(a.proc.logTail(1000)), "forbidden") {
			t.Errorf("the agent of %s was refused a request:\n%s", name, a.proc.logTail(20))
		}
	}
	// A survivor's metrics say it feeds an armed watchdog and holds one incident; no
	// agent's token is in its log, its metrics or its report.
	survivor := agents[names[1]]
	metrics := httpGet(t, ctx, "http://"+survivor.health+"/metrics")
	for _, want := range []string{"kubefence_node_agent_watchdog_armed 1", "kubefence_node_agent_watchdog_feeding 1", "kubefence_node_agent_holds 1"} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics of %s lack %q", survivor.name, want)
		}
	}
	for name, a := range agents {
		lease := readLease(t, ctx, c, name)
		for where, text := range map[string]string{"log": a.proc.logTail(100000), "report": lease.Annotations[nodeagent.ReportAnnotation], "metrics": metrics} {
			if strings.Contains(text, a.token) || strings.Contains(text, a.token[len(a.token)-20:]) {
				t.Errorf("the token of the agent of %s is in its %s", name, where)
			}
		}
	}
}

func httpGet(t *testing.T, ctx context.Context, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

func buildNodeAgent(t *testing.T, ctx context.Context) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(os.PathSeparator), "./cmd/fence-node-agent")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build fence-node-agent: %v\n%s", err, out)
	}
	return filepath.Join(dir, "fence-node-agent")
}

// startNodeAgent starts n's agent with a token bound to a pod on n, as the kubelet
// mounts it, and an emulated watchdog that crashes n when it expires.
func startNodeAgent(t *testing.T, ctx context.Context, h *Harness, bin string, n *Node) *agentNode {
	t.Helper()
	c := h.Cluster
	a := &agentNode{name: n.Name()}
	dir := t.TempDir()
	a.emu = &watchdog.Emulator{Path: filepath.Join(dir, "watchdog.sock"), Expired: func() {
		a.expired.Store(true)
		n.Crash()
		if a.proc != nil {
			_ = a.proc.stop(0)
		}
	}}
	if err := a.emu.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.emu.Close() })
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ControllerNamespace, Name: "node-agent-" + n.Name()},
		Spec: corev1.PodSpec{NodeName: n.Name(), ServiceAccountName: renderedNodeAgentSA,
			Containers: []corev1.Container{{Name: "node-agent", Image: "none"}}}}
	pod, err := c.Client.CoreV1().Pods(ControllerNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.token = boundToken(t, ctx, c, pod)
	kubeconfig := tokenKubeconfig(t, c, a.token)
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	a.health = fmt.Sprintf("127.0.0.1:%d", ports[0])
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	a.client = kubernetes.NewForConfigOrDie(rc)
	a.fencing = versioned.NewForConfigOrDie(rc)
	boot := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(boot, []byte(n.BootID()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.proc, err = startProcess(dir, "node-agent", bin, []string{
		"--kubeconfig", kubeconfig, "--node-name", n.Name(), "--namespace", ControllerNamespace,
		"--boot-id-file", boot, "--watchdog", "unix:" + a.emu.Path, "--watchdog-timeout", "3s",
		"--isolation", "3s", "--read-interval", "500ms", "--report-interval", "2s",
		"--health-probe-bind-address", a.health, "--v", "2",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent of %s:\n%s", n.Name(), a.proc.logTail(30))
		}
		_ = a.proc.stop(5 * time.Second)
	})
	return a
}

// boundToken is a token of the node agent's ServiceAccount bound to pod, as the kubelet
// mounts it: the API server adds the pod's node to its extra.
func boundToken(t *testing.T, ctx context.Context, c *Cluster, pod *corev1.Pod) string {
	t.Helper()
	expiry := int64(3600)
	tr, err := c.Client.CoreV1().ServiceAccounts(ControllerNamespace).CreateToken(ctx, renderedNodeAgentSA,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token bound to pod %s: %v", pod.Name, err)
	}
	return tr.Status.Token
}

func tokenKubeconfig(t *testing.T, c *Cluster, token string) string {
	t.Helper()
	path, err := c.TokenKubeconfig(t.TempDir(), "agent", token)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func readLease(t *testing.T, ctx context.Context, c *Cluster, node string) *coordinationv1.Lease {
	t.Helper()
	l, err := c.Client.CoordinationV1().Leases(ControllerNamespace).Get(ctx, nodeagent.LeaseName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("report Lease of %s: %v", node, err)
	}
	return l
}

// waitReport polls node's report until ok holds of it.
func waitReport(t *testing.T, ctx context.Context, c *Cluster, node, what string, ok func(nodeagent.Report) bool) nodeagent.Report {
	t.Helper()
	var last nodeagent.Report
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoordinationV1().Leases(ControllerNamespace).Get(ctx, nodeagent.LeaseName(node), metav1.GetOptions{})
		if err != nil {
			lastErr = err
			return false, nil
		}
		if last, lastErr = nodeagent.Decode(l); lastErr != nil {
			return false, nil
		}
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("no report of %s with %s: last %+v (%v)", node, what, last, lastErr)
	}
	return last
}

// checkNodeAgentRefused makes, as the agent of a, what it may not, and expects 403.
func checkNodeAgentRefused(t *testing.T, ctx context.Context, c *Cluster, a *agentNode, names []string) {
	other := names[2]
	lease := func(node, holder string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ControllerNamespace, Name: nodeagent.LeaseName(node)}}
		if err := (nodeagent.Report{BootID: "forged", Isolation: "1s"}).Encode(l, holder); err != nil {
			t.Fatal(err)
		}
		return l
	}
	own := func() *coordinationv1.Lease {
		l, err := a.client.CoordinationV1().Leases(ControllerNamespace).Get(ctx, nodeagent.LeaseName(a.name), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the agent of %s cannot read its own report: %v", a.name, err)
		}
		return l
	}
	// An unbound token of the same ServiceAccount names no node.
	unbound, err := clientFor(tokenKubeconfig(t, c, serviceAccountToken(t, ctx, c, renderedNodeAgentSA)))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		call func() error
		want string // in the refusal; empty for RBAC's
	}{
		"update another node's report": {func() error {
			l, err := c.Client.CoordinationV1().Leases(ControllerNamespace).Get(ctx, nodeagent.LeaseName(other), metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.Annotations[nodeagent.ReportAnnotation] = `{"bootID":"forged"}`
			_, err = a.client.CoordinationV1().Leases(ControllerNamespace).Update(ctx, l, metav1.UpdateOptions{})
			return err
		}, "writes only the Lease kubefence-node-" + a.name},
		"create a report for a node without one": {func() error {
			_, err := a.client.CoordinationV1().Leases(ControllerNamespace).Create(ctx, lease("no-such-node", "no-such-node"), metav1.CreateOptions{})
			return err
		}, "writes only the Lease kubefence-node-" + a.name},
		"hold its own report in another's name": {func() error {
			l := own()
			other := other
			l.Spec.HolderIdentity = &other
			_, err := a.client.CoordinationV1().Leases(ControllerNamespace).Update(ctx, l, metav1.UpdateOptions{})
			return err
		}, "spec.holderIdentity must be the agent's node"},
		"write a report with a token not bound to a pod": {func() error {
			_, err := unbound.CoordinationV1().Leases(ControllerNamespace).Create(ctx, lease("unbound", "unbound"), metav1.CreateOptions{})
			return err
		}, "token bound to its pod"},
		"write other Leases elsewhere": {func() error {
			_, err := a.client.CoordinationV1().Leases(NodeLeaseNamespace).Update(ctx, lease(a.name, a.name), metav1.UpdateOptions{})
			return err
		}, ""},
		"read a Secret": {func() error {
			_, err := a.client.CoreV1().Secrets(ControllerNamespace).Get(ctx, BMCSecret, metav1.GetOptions{})
			return err
		}, ""},
		"read pods": {func() error {
			_, err := a.client.CoreV1().Pods(ControllerNamespace).List(ctx, metav1.ListOptions{})
			return err
		}, ""},
		"update a node": {func() error {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, a.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			_, err = a.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}, ""},
		"create a NodeFence": {func() error {
			_, err := a.fencing.FencingV1alpha1().NodeFences().Create(ctx, &v1alpha1.NodeFence{
				ObjectMeta: metav1.ObjectMeta{GenerateName: other + "-"}, Spec: v1alpha1.NodeFenceSpec{NodeName: other}}, metav1.CreateOptions{})
			return err
		}, ""},
		"get one NodeFence (it lists them all, with quorum reads)": {func() error {
			_, err := a.fencing.FencingV1alpha1().NodeFences().Get(ctx, "any", metav1.GetOptions{})
			return err
		}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.call()
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want 403 Forbidden%s", err, map[bool]string{true: fmt.Sprintf(" saying %q", tc.want)}[tc.want != ""])
			}
		})
	}
	// Its own report it may write.
	if _, err := a.client.CoordinationV1().Leases(ControllerNamespace).Update(ctx, own(), metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		t.Errorf("the agent of %s may not update its own report: %v", a.name, err)
	}
}
