package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

// watchdogs are the nodes' emulated watchdogs, served on the host where each node's
// agent pod finds its own through the chart's hostPath: a countdown that runs out powers
// its node off (every process at once), as a hardware watchdog resets a machine.
type watchdogs struct {
	dir  string
	emus []*watchdog.Emulator
	mu   sync.Mutex
	// resets are when each node's countdown ran out.
	resets map[string]time.Time
}

func startWatchdogs(t *testing.T, ctx context.Context, c *Cluster) *watchdogs {
	t.Helper()
	dir, err := os.MkdirTemp("", "kfwd")
	if err != nil {
		t.Fatal(err)
	}
	// The agents run as 65532: they must reach their socket.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w := &watchdogs{dir: dir, resets: map[string]time.Time{}}
	t.Cleanup(func() {
		for _, e := range w.emus {
			_ = e.Close()
		}
		_ = os.RemoveAll(dir)
	})
	for _, n := range c.Nodes() {
		e := &watchdog.Emulator{Path: filepath.Join(dir, n.Name+".sock"), Expired: func() {
			w.mu.Lock()
			if _, ok := w.resets[n.Name]; !ok {
				w.resets[n.Name] = time.Now()
			}
			w.mu.Unlock()
			t.Logf("watchdog of %s ran out: powering the node off", n.Name)
			if err := c.Crash(ctx, n.Name); err != nil {
				t.Errorf("power off %s on its watchdog: %v", n.Name, err)
			}
		}}
		if err := e.Start(); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(e.Path, 0o666); err != nil {
			t.Fatal(err)
		}
		w.emus = append(w.emus, e)
	}
	return w
}

func (w *watchdogs) reset(node string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.resets[node]
	return at, ok
}

// watchdogValues installs the node agents with the emulated watchdogs (T = 5 s,
// isolation 3 s) and a policy whose BMC level gives up fast and whose second level is
// the nodes' own watchdogs.
func watchdogValues(t *testing.T, w *watchdogs) string {
	t.Helper()
	v := fmt.Sprintf(`nodeAgent:
  enabled: true
  isolation: 3s
  readInterval: 1s
  reportInterval: 10s
  watchdog:
    path: unix:%s/$(NODE_NAME).sock
    timeout: 5s
    emulatedForTests: true
  bootIDFile: /proc/sys/kernel/random/boot_id
policies:
- name: default
  levels:
  - agents: [ipmi]
    timeout: 5s
  - watchdog: true
    timeout: 2m
`, w.dir)
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitArmed waits until every node's agent has reported its watchdog armed, on the
// node's current boot.
func waitArmed(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	waitFor(t, ctx, "every node agent reporting its watchdog armed", func() (bool, error) {
		for _, n := range c.Nodes() {
			r, err := agentReport(ctx, c, n.Name)
			if r == nil || !r.Watchdog.Armed || r.BootID != n.BootID() {
				return false, err
			}
		}
		return true, nil
	})
}

// agentReport is the report of node's agent, nil before it wrote one.
func agentReport(ctx context.Context, c *Cluster, node string) (*nodeagent.Report, error) {
	l, err := c.Client.CoordinationV1().Leases(Namespace).Get(ctx, nodeagent.LeaseName(node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r, err := nodeagent.Decode(l)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// TestWatchdogOnRealNodes: the watchdog level on three real nodes, installed with the
// chart (the node agent DaemonSet feeding emulated watchdogs served on the host). A
// node is cut off from the network (alive, but no API server and no peers) and its BMC
// does not answer: its agent stops feeding, its watchdog powers it off, and only then does
// kubefence release its StatefulSet pod, through the watchdog level once a majority of
// agents held the NodeFence and isolation + 2 × T passed. The volume is detached from the
// node and attached elsewhere after the reset, and no healthy node's watchdog ran out.
func TestWatchdogOnRealNodes(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	w := startWatchdogs(t, ctx, c)
	out, err := c.Install(ctx, watchdogValues(t, w))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("images and helm install:\n%s", out)
	waitArmed(t, ctx, c)
	if err := c.CreateVolume(ctx, "web-data", "default", "data-web-0"); err != nil {
		t.Fatal(err)
	}
	victim := otherThan(c, leaderNode(t, ctx, c))
	if _, err := c.Client.AppsV1().StatefulSets("default").Create(ctx, StatefulSet("web", victim), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := WaitFor(ctx, "web-0 running on "+victim, func() (bool, error) {
		p := c.RunningPod(ctx, "default", "web-0")
		return p != nil && p.Spec.NodeName == victim, nil
	}); err != nil {
		t.Fatal(err)
	}
	// The victim's BMC does not answer: its address names a port nothing serves.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, BMCAnnotation, c.BMC(victim).Host()+":9")
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, victim, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	if err := c.Node(victim).CutNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s cut off from the network at %s", victim, began.Format(time.RFC3339Nano))
	var moved string
	waitFor(t, ctx, "web-0 running on another node", func() (bool, error) {
		p := c.RunningPod(ctx, "default", "web-0")
		if p != nil && p.Spec.NodeName != victim {
			moved = p.Spec.NodeName
			return true, nil
		}
		return false, nil
	})
	reset, ok := w.reset(victim)
	if !ok {
		t.Fatalf("web-0 runs on %s, but %s's watchdog never ran out: the node may still run", moved, victim)
	}
	started := startedAt(c.RunningPod(ctx, "default", "web-0"))
	detached, attached, err := c.volumeMoves("web-data", victim, moved, began)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: watchdog reset %s after the cut, volume detached %s, attached to %s %s, pod started there %s",
		victim, since(began, reset), since(began, detached), moved, since(began, attached), since(began, started))
	if !reset.Before(detached) || !reset.Before(attached) || !reset.Before(started.Add(time.Second)) {
		t.Errorf("%s was reset at %s, after its volume was detached (%s) or attached elsewhere (%s) or web-0 started elsewhere (%s)",
			victim, reset.Format(time.RFC3339Nano), detached.Format(time.RFC3339Nano), attached.Format(time.RFC3339Nano), started.Format(time.RFC3339))
	}
	incs, err := c.NodeFences(ctx, victim)
	if err != nil || len(incs) != 1 {
		t.Fatalf("NodeFences of %s: %d (%v), want 1", victim, len(incs), err)
	}
	level, _, _ := unstructured.NestedInt64(incs[0].Object, "status", "verifiedLevel")
	phase, _, _ := unstructured.NestedString(incs[0].Object, "status", "phase")
	if level != 2 || phase != string(v1alpha1.PhaseRemediated) {
		t.Errorf("incident %s %s, verified at level %d; want Remediated at level 2 (the watchdog level)", incs[0].GetName(), phase, level)
	}
	for _, n := range c.Nodes() {
		if at, ok := w.reset(n.Name); ok && n.Name != victim {
			t.Errorf("healthy node %s reset by its watchdog at %s", n.Name, at.Format(time.RFC3339Nano))
		}
	}
}

// TestWatchdogDeviceOnRealNodes: the chart with a watchdog device (nodeAgent.watchdog.path
// an absolute path, beside peers) on two real nodes. No real watchdog may be opened here
// (one not fed resets the machine), so the device is a character device with the numbers
// of /dev/null, made on the host where the nodes find it: the API server admits the agent
// pod (privileged, root, the device mounted as itself through a CharDevice hostPath), the
// kubelet mounts it. sysfs gives no nowayout state for it, so the agent would refuse it
// before opening it; with nowayout allowed (nodeAgent.watchdog.allowNowayout) the agent
// opens it and asks its driver what it supports, and the refusal (no watchdog answers
// WDIOC_GETSUPPORT) is in each node's report, not only in a log, with the device left
// counting as far as the agent can tell (it cannot be sure it stops), never armed.
func TestWatchdogDeviceOnRealNodes(t *testing.T) {
	c := startCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "kfwdd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	dev := filepath.Join(dir, "watchdog")
	if err := unix.Mknod(dev, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatalf("make a character device like /dev/null at %s (the real-node tests run as root): %v", dev, err)
	}
	if err := c.PrepareBMCAccess(ctx); err != nil { // the release namespace
		t.Fatal(err)
	}
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-peer-key", Namespace: Namespace},
		StringData: map[string]string{"key": "0123456789abcdef"}}
	if _, err := c.Client.CoreV1().Secrets(Namespace).Create(ctx, key, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(fmt.Sprintf(`nodeAgent:
  enabled: true
  isolation: 3s
  readInterval: 1s
  peers:
    enabled: true
    keySecret: kubefence-peer-key
  watchdog:
    path: %s
    timeout: 5s
    allowNowayout: true
  bootIDFile: /proc/sys/kernel/random/boot_id
`, dev)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := c.Install(ctx, values)
	if err != nil {
		t.Fatalf("install with a watchdog device: %v\n%s", err, out)
	}
	want := fmt.Sprintf("not armed: watchdog %s: read the driver's support flags (WDIOC_GETSUPPORT): inappropriate ioctl for device: the device counts down anyway and cannot be stopped (nowayout)", dev)
	var wrong []string // reports that tried to arm and failed otherwise: final, no use waiting
	waitFor(t, ctx, "every node's report saying why its watchdog device is not armed", func() (bool, error) {
		wrong = nil
		done := true
		for _, n := range c.Nodes() {
			r, err := agentReport(ctx, c, n.Name)
			if r == nil {
				return false, err
			}
			switch {
			case r.Watchdog.Armed || (strings.HasPrefix(r.Watchdog.Stopped, "not armed: ") && (r.Watchdog.Stopped != want || !r.Watchdog.Counting)):
				wrong = append(wrong, fmt.Sprintf("%s reports watchdog %+v", n.Name, r.Watchdog))
			case r.Watchdog.Stopped != want:
				done = false
			}
		}
		return done || len(wrong) > 0, nil
	})
	if len(wrong) > 0 {
		t.Fatalf("%s; want not armed and %q", strings.Join(wrong, "; "), want)
	}
	pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node-agent"})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("node agent pods: %d (%v), want 2", len(pods.Items), err)
	}
	for _, p := range pods.Items {
		sc := p.Spec.Containers[0].SecurityContext
		if sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
			t.Errorf("agent pod %s runs without privilege or not as root: %+v", p.Name, sc)
		}
	}
	// KubefenceWatchdogNotArmed's situation: the runbooks' blocks that read the node
	// agents, as written (runbooksRound runs every other block).
	admin, node := clusterAdmin(t, ctx, c), c.Nodes()[0].Name
	var all strings.Builder
	for _, b := range runbookBlocks(t, nodeAgentBlock) {
		all.WriteString(admin.run(t, ctx, c, true, 0, fill(t, b, map[string]string{"NODE": node})))
	}
	mustContain(t, "the node agents' runbooks", all.String(), "inappropriate ioctl for device", node, "Running")
}
