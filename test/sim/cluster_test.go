package sim

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// powerSwitch is an in-memory BMC.
type powerSwitch struct{ on atomic.Bool }

func (p *powerSwitch) PoweredOn() (bool, error) { return p.on.Load(), nil }

const simHeartbeat = time.Second

func startTestCluster(t *testing.T, ctx context.Context, names ...string) (*Cluster, map[string]*powerSwitch) {
	t.Helper()
	power := map[string]*powerSwitch{}
	var nodes []NodeSpec
	for _, n := range names {
		power[n] = &powerSwitch{}
		power[n].on.Store(true)
		nodes = append(nodes, NodeSpec{Name: n, Labels: map[string]string{"sim": "yes"},
			Annotations: map[string]string{"fencing.kubefence.io/bmc": "sim"}, Power: power[n]})
	}
	began := time.Now()
	c := startCluster(t, ctx, Options{Dir: t.TempDir(), Nodes: nodes, LeaseRenewInterval: simHeartbeat,
		StatusUpdateInterval: simHeartbeat, Logf: t.Logf,
		ControllerManagerArgs: []string{"--node-monitor-grace-period=5s"}})
	t.Logf("cluster of %d nodes started in %s", len(names), time.Since(began).Round(time.Millisecond))
	return c, power
}

// startCluster starts a cluster that stops when the test ends, keeping its logs if the
// test failed.
func startCluster(t *testing.T, ctx context.Context, o Options) *Cluster {
	t.Helper()
	c, err := Start(ctx, o)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
		keepLogs(t, c)
	})
	return c
}

// keepLogs copies the component logs out of the test's temporary directory on failure.
func keepLogs(t *testing.T, c *Cluster) {
	if !t.Failed() {
		return
	}
	dst, err := os.MkdirTemp("", "kubefence-sim-logs-")
	if err == nil {
		err = os.CopyFS(dst, os.DirFS(c.LogDir()))
	}
	t.Logf("component logs kept in %s (%v)", dst, err)
}

// eventually polls cond every 100ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.After(timeout)
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		ok, err := cond()
		if ok {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("%s: not within %s (last error: %v)", what, timeout, err)
		case <-poll.C:
		}
	}
}

func renewTime(ctx context.Context, c *Cluster, node string) (time.Time, error) {
	l, err := c.Client.CoordinationV1().Leases(NodeLeaseNamespace).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	if l.Spec.RenewTime == nil {
		return time.Time{}, fmt.Errorf("lease %s never renewed", node)
	}
	return l.Spec.RenewTime.Time, nil
}

// expectSilent checks that dead's Lease stays at its current renewTime while every node in
// live renews at least three more intervals.
func expectSilent(t *testing.T, ctx context.Context, c *Cluster, dead string, live ...string) {
	t.Helper()
	frozen, err := renewTime(ctx, c, dead)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range live {
		eventually(t, 20*simHeartbeat, "lease of "+n+" advances", func() (bool, error) {
			rt, err := renewTime(ctx, c, n)
			return rt.After(frozen.Add(3 * simHeartbeat)), err
		})
	}
	if rt, err := renewTime(ctx, c, dead); err != nil || !rt.Equal(frozen) {
		t.Fatalf("lease of dead node %s moved from %s to %s (%v)", dead, frozen, rt, err)
	}
}

func statefulPod(ctx context.Context, c *Cluster) (*corev1.Pod, error) {
	return c.Client.CoreV1().Pods(Namespace).Get(ctx, "web-0", metav1.GetOptions{})
}

func TestCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c, power := startTestCluster(t, ctx, "node-a", "node-b", "node-c")

	if err := c.DeployStatefulSet(ctx, "web", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Deploy(ctx, "stateless", 2); err != nil {
		t.Fatal(err)
	}
	pod, err := statefulPod(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	crashed := pod.Spec.NodeName
	expectAttached(t, ctx, c, crashed)
	others := otherNodes(c, crashed)

	// A crashed kubelet goes silent but its containers keep running.
	c.Node(crashed).Crash()
	expectSilent(t, ctx, c, crashed, others...)
	expectReady(t, ctx, c, crashed, corev1.ConditionUnknown)
	if got := c.Node(crashed).RunningPods(); !contains(got, Namespace+"/web-0") {
		t.Fatalf("crashed node should still run web-0, runs %v", got)
	}

	replacement := expectMultiAttach(t, ctx, c, crashed, pod.UID)

	// Power off the node that does not run web-0 now.
	off := others[0]
	if off == replacement {
		off = others[1]
	}
	power[off].on.Store(false)
	eventually(t, 20*simHeartbeat, off+" notices power off", func() (bool, error) { return !c.Node(off).Alive(), nil })
	expectSilent(t, ctx, c, off, replacement)
	if got := c.Node(off).RunningPods(); len(got) != 0 {
		t.Fatalf("powered-off node still runs %v", got)
	}

	expectNewBoot(t, ctx, c, crashed, func() { c.Node(crashed).Restart() })
	expectReady(t, ctx, c, crashed, corev1.ConditionTrue)
	expectNewBoot(t, ctx, c, off, func() { power[off].on.Store(true) })
	expectStopCleans(t, c)
}

// expectMultiAttach moves web-0 off the crashed node and checks the replacement is refused
// until the stale VolumeAttachment goes, as kubefence's remediation would remove it.
func expectMultiAttach(t *testing.T, ctx context.Context, c *Cluster, crashed string, oldUID types.UID) string {
	t.Helper()
	expectAttached(t, ctx, c, crashed)
	patch := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, crashed, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	if err := c.Client.CoreV1().Pods(Namespace).Delete(ctx, "web-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	var node string
	eventually(t, 60*time.Second, "replacement web-0 refused with Multi-Attach", func() (bool, error) {
		p, err := statefulPod(ctx, c)
		if err != nil || p.UID == oldUID {
			return false, err
		}
		node = p.Spec.NodeName
		return strings.Contains(p.Status.Message, "Multi-Attach error: volume "+PVName("web", 0)+
			" is attached to node "+crashed), fmt.Errorf("status message %q", p.Status.Message)
	})
	stale := AttachmentName(PVName("web", 0), CSIDriver, crashed)
	if err := c.Client.StorageV1().VolumeAttachments().Delete(ctx, stale, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitPodsRunning(ctx, "web", 1); err != nil {
		t.Fatal(err)
	}
	expectAttached(t, ctx, c, node)
	return node
}

// expectReady waits for the Ready condition that kube-controller-manager's node lifecycle
// controller (Unknown) or the kubelet (True) sets.
func expectReady(t *testing.T, ctx context.Context, c *Cluster, node string, want corev1.ConditionStatus) {
	t.Helper()
	eventually(t, 40*time.Second, fmt.Sprintf("%s Ready=%s", node, want), func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == want, fmt.Errorf("Ready=%s", cond.Status)
			}
		}
		return false, nil
	})
}

func expectAttached(t *testing.T, ctx context.Context, c *Cluster, node string) {
	t.Helper()
	name := AttachmentName(PVName("web", 0), CSIDriver, node)
	va, err := c.Client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("volume attachment of web-0 on %s: %v", node, err)
	}
	if !va.Status.Attached || va.Spec.Attacher != CSIDriver || va.Spec.NodeName != node ||
		*va.Spec.Source.PersistentVolumeName != PVName("web", 0) {
		t.Fatalf("unexpected attachment %+v %+v", va.Spec, va.Status)
	}
}

// expectNewBoot runs revive and waits for the node to report a new bootID and renew again.
func expectNewBoot(t *testing.T, ctx context.Context, c *Cluster, node string, revive func()) {
	t.Helper()
	before, err := renewTime(ctx, c, node)
	if err != nil {
		t.Fatal(err)
	}
	oldBoot := c.Node(node).BootID()
	revive()
	eventually(t, 20*simHeartbeat, node+" reports a new bootID and renews", func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		rt, err := renewTime(ctx, c, node)
		boot := n.Status.NodeInfo.BootID
		return boot != oldBoot && boot == c.Node(node).BootID() && rt.After(before), err
	})
}

func expectStopCleans(t *testing.T, c *Cluster) {
	t.Helper()
	pids := c.PIDs()
	if len(pids) != 4 {
		t.Fatalf("want 4 processes, got %v", pids)
	}
	began := time.Now()
	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	t.Logf("stopped in %s", time.Since(began).Round(time.Millisecond))
	for name, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !os.IsNotExist(err) {
			t.Errorf("%s (pid %d) still present after Stop: %v", name, pid, err)
		}
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

func otherNodes(c *Cluster, except string) []string {
	var out []string
	for _, n := range c.Nodes() {
		if n.Name() != except {
			out = append(out, n.Name())
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestStartValidation(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		opts Options
		want string
	}{
		"no dir":         {opts: Options{}, want: "options.Dir: required"},
		"unnamed node":   {opts: Options{Dir: "x", Nodes: []NodeSpec{{}}}, want: "options.Nodes[0].Name: required"},
		"duplicate node": {opts: Options{Dir: "x", Nodes: []NodeSpec{{Name: "a"}, {Name: "a"}}}, want: "duplicate"},
		"missing binaries": {opts: Options{Dir: t.TempDir(), BinDir: t.TempDir()},
			want: "run hack/controlplane.sh"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Start(context.Background(), tc.opts)
			if err == nil {
				c.Stop()
				t.Fatal("start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}
