package realnode

// The second datacenter of docs/getting-started.md §4, on the real nodes: the doc's own
// commands make the certificates and Secrets, the doc's values install the chart with a
// remote agent, and a node of that datacenter is fenced through it.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/test/sim"
)

// What getting-started §4 names: the remote agent, its namespace and the zone label of the
// datacenter's nodes.
const (
	remoteAgent     = "ipmi-dc2"
	remoteNamespace = "fencing-dc2"
	zoneLabel       = "topology.kubernetes.io/zone"
	remoteZone      = "dc2"
	// The markers in docs/getting-started.md before the commands and values this test runs.
	secretsMarker = "<!-- run by TestFencingOnRealNodes (test/realnode) as written -->"
	valuesMarker  = "<!-- the values TestFencingOnRealNodes (test/realnode) installs -->"
)

// installTwoDatacenters installs kubefence (with install) as getting-started says, §4 included: node-2 and
// node-3 are the second datacenter (zone dc2; node-1 has no zone, as a zone of one would
// be held dark whenever its node dies); step 2's BMC Secret and annotations; §4's openssl
// and kubectl commands, run as written; helm install with §4's values. It checks that the
// remote agent runs in its own namespace on a dc2 node, that each controller pod's
// validate init container passed, and that the leader reached the agent.
func installTwoDatacenters(t *testing.T, ctx context.Context, c *Cluster, install func(values string) (string, error)) {
	t.Helper()
	for _, n := range []string{"node-2", "node-3"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, zoneLabel, remoteZone)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.PrepareBMCAccess(ctx); err != nil {
		t.Fatal(err)
	}
	doc := gettingStarted(t)
	k := &kubectl{c: c, dir: t.TempDir(), literals: map[string]string{"fence": c.bmcs[0].User(), "...": c.bmcs[0].Password()}}
	k.runDocBlock(t, ctx, docBlock(t, doc, secretsMarker, "sh"))
	values := filepath.Join(t.TempDir(), "dc2.yaml")
	if err := os.WriteFile(values, []byte(docBlock(t, doc, valuesMarker, "yaml")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := install(values)
	if err != nil {
		t.Fatalf("helm install with getting-started §4's values: %v\n%s", err, podReport(ctx, c, Namespace, remoteNamespace))
	}
	t.Logf("images and helm install with a remote agent:\n%s", out)
	agent := remoteAgentPod(t, ctx, c)
	if c.Node(agent.Spec.NodeName) == nil || !hasZone(t, ctx, c, agent.Spec.NodeName) {
		t.Fatalf("remote agent pod %s runs on %s, not on a node of zone %s", agent.Name, agent.Spec.NodeName, remoteZone)
	}
	// helm's --wait counts the Deployment ready with one replica unavailable (its
	// maxUnavailable): the other may still be in its validate container.
	waitFor(t, ctx, "every controller pod Ready", func() (bool, error) {
		d, err := c.Client.AppsV1().Deployments(Namespace).Get(ctx, controllerName, metav1.GetOptions{})
		return err == nil && d.Spec.Replicas != nil && d.Status.ReadyReplicas == *d.Spec.Replicas && d.Status.Replicas == *d.Spec.Replicas, err
	})
	checkValidateLogs(t, ctx, c, controllerPods(t, ctx, c))
	lease := leader.LeaseName("agent", remoteAgent)
	waitFor(t, ctx, "the leader's Lease for remote agent "+remoteAgent, func() (bool, error) {
		_, err := c.Client.CoordinationV1().Leases(Namespace).Get(ctx, lease, metav1.GetOptions{})
		return err == nil, err
	})
	t.Logf("remote agent %s/%s Ready on %s; the leader renews its Lease %s", remoteNamespace, agent.Name, agent.Spec.NodeName, lease)
	revalidate(t, ctx, c)
}

// revalidate replaces the standby controller pod: the agent now runs, so the new pod's
// validate init container loads the client certificate, dials the agent with mutual TLS
// and has it check its parameters, with no warning.
func revalidate(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	leaderAt := leaderNode(t, ctx, c)
	var standby corev1.Pod
	for _, p := range controllerPods(t, ctx, c) {
		if p.Spec.NodeName != leaderAt {
			standby = p
		}
	}
	if standby.Name == "" {
		t.Fatal("no standby controller pod")
	}
	if err := c.Client.CoreV1().Pods(Namespace).Delete(ctx, standby.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var fresh corev1.Pod
	waitFor(t, ctx, "a new standby controller pod Ready", func() (bool, error) {
		for _, p := range controllerPods(t, ctx, c) {
			if p.Name != standby.Name && p.Spec.NodeName != leaderAt && podReady(&p) {
				fresh = p
				return true, nil
			}
		}
		return false, nil
	})
	log := checkValidateLogs(t, ctx, c, []corev1.Pod{fresh})
	if strings.Contains(log, "warning") {
		t.Fatalf("with the agent running, pod %s's validate container still warned:\n%s", fresh.Name, log)
	}
}

// remoteTarget is the node of the second datacenter that does not run the remote agent.
func remoteTarget(t *testing.T, ctx context.Context, c *Cluster) string {
	t.Helper()
	agent := remoteAgentPod(t, ctx, c).Spec.NodeName
	for _, n := range []string{"node-2", "node-3"} {
		if n != agent {
			return n
		}
	}
	return ""
}

// checkRemoteFence: the node's newest NodeFence was verified by the remote agent, and the
// local agent was never called for it.
func checkRemoteFence(t *testing.T, ctx context.Context, c *Cluster, node string) {
	t.Helper()
	nf := nodeFence(t, ctx, c, node)
	attempts, _, _ := unstructured.NestedSlice(nf.Object, "status", "attempts")
	verified := false
	for _, a := range attempts {
		m, _ := a.(map[string]any)
		if m["agent"] != remoteAgent {
			t.Errorf("NodeFence %s called agent %v; only %s fences zone %s", nf.GetName(), m["agent"], remoteAgent, remoteZone)
		}
		verified = verified || m["state"] == string(v1alpha1.AttemptVerified)
	}
	if !verified {
		t.Fatalf("NodeFence %s has no verified attempt by %s: %v", nf.GetName(), remoteAgent, attempts)
	}
	t.Logf("NodeFence %s verified through remote agent %s", nf.GetName(), remoteAgent)
}

func remoteAgentPod(t *testing.T, ctx context.Context, c *Cluster) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	waitFor(t, ctx, "one Ready remote agent pod in "+remoteNamespace, func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(remoteNamespace).List(ctx, metav1.ListOptions{LabelSelector: "fencing.kubefence.io/agent=" + remoteAgent})
		if err != nil || len(pods.Items) != 1 {
			return false, err
		}
		pod = pods.Items[0]
		return podReady(&pod), nil
	})
	return pod
}

func hasZone(t *testing.T, ctx context.Context, c *Cluster, node string) bool {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Labels[zoneLabel] == remoteZone
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkValidateLogs: each pod's validate init container found the configuration valid,
// the remote agent's client certificate loaded where it was mounted (an agent that did not
// answer yet is a warning). It returns the last pod's log.
func checkValidateLogs(t *testing.T, ctx context.Context, c *Cluster, pods []corev1.Pod) string {
	t.Helper()
	var log string
	for _, p := range pods {
		var err error
		if log, err = containerLog(ctx, c, p.Namespace, p.Name, "validate"); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Split(log, "\n"), "/run/kubefence/config.yaml: valid") {
			t.Fatalf("pod %s's validate container said:\n%s", p.Name, log)
		}
		t.Logf("pod %s, validate: %s", p.Name, strings.ReplaceAll(strings.TrimSpace(log), "\n", "; "))
	}
	return log
}

func containerLog(ctx context.Context, c *Cluster, ns, pod, container string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := c.Client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("logs of %s/%s container %s: %w", ns, pod, container, err)
	}
	return string(b), nil
}

// podReport is every pod of the namespaces with its containers' states, and the log of
// each container that is not running: what a user would look at when helm install waits
// in vain.
func podReport(ctx context.Context, c *Cluster, namespaces ...string) string {
	var out strings.Builder
	for _, ns := range namespaces {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Fprintf(&out, "pods of %s: %v\n", ns, err)
			continue
		}
		for _, p := range pods.Items {
			fmt.Fprintf(&out, "pod %s/%s on %s: %s\n", ns, p.Name, p.Spec.NodeName, p.Status.Phase)
			for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
				state := "running"
				switch {
				case s.State.Waiting != nil:
					state = "waiting: " + s.State.Waiting.Reason + " " + s.State.Waiting.Message
				case s.State.Terminated != nil:
					state = fmt.Sprintf("terminated: %s, exit %d", s.State.Terminated.Reason, s.State.Terminated.ExitCode)
				}
				fmt.Fprintf(&out, "  %s (restarts %d): %s\n", s.Name, s.RestartCount, state)
				if state != "running" {
					if log, err := containerLog(ctx, c, ns, p.Name, s.Name); err == nil && log != "" {
						fmt.Fprintf(&out, "    log: %s\n", strings.ReplaceAll(strings.TrimSpace(log), "\n", "\n    log: "))
					}
				}
			}
		}
	}
	return out.String()
}

// gettingStarted is docs/getting-started.md.
func gettingStarted(t *testing.T) string {
	t.Helper()
	root, err := sim.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docBlock is the first fenced block of language lang after marker in doc.
func docBlock(t *testing.T, doc, marker, lang string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, marker)
	if !ok {
		t.Fatalf("docs/getting-started.md lost the marker %q", marker)
	}
	_, rest, ok = strings.Cut(rest, "```"+lang+"\n")
	block, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatalf("docs/getting-started.md has no %s block after %q", lang, marker)
	}
	return block
}

// kubectl carries out the kubectl commands of a doc block with the test's client, as
// kubectl would: no kubectl binary comes with the test's cluster. Only the forms the doc
// uses are known; any other fails the test, so the doc cannot say what this does not run.
type kubectl struct {
	c   *Cluster
	dir string // where the block ran: relative --from-file paths start here
	// literals replace --from-literal values: the doc's placeholders for the credentials
	// of the test's BMCs. Each must be used.
	literals map[string]string
	used     map[string]bool
}

// runDocBlock runs block with bash in k.dir, as a user would paste it, kubectl recording
// its arguments; then it carries out each recorded kubectl command in order.
func (k *kubectl) runDocBlock(t *testing.T, ctx context.Context, block string) {
	t.Helper()
	calls := filepath.Join(k.dir, ".kubectl-calls")
	script := "set -euo pipefail\nkubectl() { printf '%s\\0' \"$#\" \"$@\" >>" + shellQuote(calls) + "; }\n" + block
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = k.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("getting-started §4's commands: %v\n%s", err, out)
	}
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatalf("getting-started §4's commands ran no kubectl: %v", err)
	}
	fields := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	k.used = map[string]bool{}
	for len(fields) > 0 {
		var n int
		if _, err := fmt.Sscan(fields[0], &n); err != nil || n > len(fields)-1 {
			t.Fatalf("recorded kubectl calls are garbled at %q", fields)
		}
		args := fields[1 : n+1]
		fields = fields[n+1:]
		if err := k.run(ctx, args); err != nil {
			t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
		}
	}
	for l := range k.literals {
		if !k.used[l] {
			t.Fatalf("getting-started §4 no longer creates a Secret with the literal %q, which the test fills in with its BMCs' credentials", l)
		}
	}
}

func (k *kubectl) run(ctx context.Context, args []string) error {
	ns := "default"
	var rest []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case (a == "-n" || a == "--namespace") && i+1 < len(args):
			ns = args[i+1]
			i++
		case strings.HasPrefix(a, "--namespace="):
			ns = strings.TrimPrefix(a, "--namespace=")
		default:
			rest = append(rest, a)
		}
	}
	if ns == DocNamespace {
		ns = Namespace // the user's namespace for the docs'
	}
	switch {
	case len(rest) == 3 && rest[0] == "create" && rest[1] == "namespace":
		_, err := k.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rest[2]}}, metav1.CreateOptions{})
		return err
	case len(rest) > 4 && rest[0] == "create" && rest[1] == "secret" && rest[2] == "generic":
		data, err := k.secretData(rest[4:])
		if err != nil {
			return err
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: rest[3], Namespace: ns}, Type: corev1.SecretTypeOpaque, Data: data}
		_, err = k.c.Client.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
		return err
	}
	return fmt.Errorf("not a command this test carries out (create namespace, create secret generic --from-file/--from-literal)")
}

func (k *kubectl) secretData(flags []string) (map[string][]byte, error) {
	data := map[string][]byte{}
	for _, f := range flags {
		name, kv, _ := strings.Cut(f, "=")
		key, value, ok := strings.Cut(kv, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("%s: want KEY=VALUE", f)
		}
		switch name {
		case "--from-file":
			if !filepath.IsAbs(value) {
				value = filepath.Join(k.dir, value)
			}
			b, err := os.ReadFile(value)
			if err != nil {
				return nil, err
			}
			data[key] = b
		case "--from-literal":
			if real, ok := k.literals[value]; ok {
				k.used[value] = true
				value = real
			}
			data[key] = []byte(value)
		default:
			return nil, fmt.Errorf("flag %s: not one this test carries out", f)
		}
	}
	return data, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
