package realnode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/test/sim"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// startCluster starts n real nodes for one test and stops them when it ends; the
// cluster's files stay under the test's temporary directory, and its logs are listed
// when the test fails.
func startCluster(t *testing.T, n int) *Cluster {
	t.Helper()
	// ipmi_sim's configuration names paths that must not contain spaces; t.TempDir has
	// none, but its length grows with the test name, which is fine here.
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Dir: dir, Nodes: n, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			keep := filepath.Join(os.TempDir(), "kubefence-realnode-"+strings.ReplaceAll(t.Name(), "/", "_"))
			_ = os.RemoveAll(keep)
			if err := os.CopyFS(keep, os.DirFS(dir)); err == nil {
				t.Logf("cluster files kept in %s", keep)
			}
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	return c
}

// install builds and pushes the image, then installs the chart with its defaults.
func install(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	out, err := c.PushKubefence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("images:\n%s", out)
	if err := c.PrepareBMCAccess(ctx); err != nil {
		t.Fatal(err)
	}
	root, err := sim.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err = c.Helm(ctx, "install", Release, filepath.Join(root, "deploy", "helm", "kubefence"),
		"-n", Namespace, "--wait", "--timeout", "5m")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm install:\n%s", out)
}

// leaderNode is the node of the replica that holds the leader Lease.
func leaderNode(t *testing.T, ctx context.Context, c *Cluster) string {
	t.Helper()
	var lease *coordinationv1.Lease
	waitFor(t, ctx, "a leader", func() (bool, error) {
		l, err := c.Client.CoordinationV1().Leases(Namespace).Get(ctx, controllerName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		lease = l
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	holder := *lease.Spec.HolderIdentity
	pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if strings.HasPrefix(holder, p.Name) {
			return p.Spec.NodeName
		}
	}
	t.Fatalf("leader %q is no pod of %s", holder, Namespace)
	return ""
}

// waitFor polls cond every 250ms until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last error: %v)", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// statefulSet is one replica of busybox that prefers node.
func statefulSet(name, node string) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](5),
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
							Weight: 100,
							Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
								Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}},
						}},
					}},
					Containers: []corev1.Container{{
						Name: "app", Image: BusyboxImage,
						Command: []string{"/bin/sh", "-c", "while true; do sleep 1; done"},
					}},
				},
			},
		},
	}
}

// runningPod returns the pod called name when it runs (all containers started), else nil.
func runningPod(ctx context.Context, c *Cluster, ns, name string) *corev1.Pod {
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return nil
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return nil
		}
	}
	return p
}

// startedAt is when the pod's first container started, by the kubelet's report.
func startedAt(p *corev1.Pod) time.Time {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil {
			return cs.State.Running.StartedAt.Time
		}
	}
	return time.Time{}
}

// TestDeadNodeFencedOnRealNodes: the chart installed with its defaults on three real
// nodes; the node running a StatefulSet's pod dies (every process at once, its BMC still
// on). kubefence powers it off through ipmi_sim with the image's own IPMI agent, and the
// pod runs on another node, started only after the power-off. Powered on again, the node
// boots with a new boot ID, is released and takes pods again.
func TestDeadNodeFencedOnRealNodes(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	install(t, ctx, c)

	leader := leaderNode(t, ctx, c)
	var target string
	for _, n := range c.Nodes() {
		if n.Name != leader {
			target = n.Name
			break
		}
	}
	t.Logf("leader runs on %s; %s will die", leader, target)
	if _, err := c.Client.AppsV1().StatefulSets("default").Create(ctx, statefulSet("web", target), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "web-0 running on "+target, func() (bool, error) {
		p := runningPod(ctx, c, "default", "web-0")
		return p != nil && p.Spec.NodeName == target, nil
	})
	oldBoot := c.Node(target).BootID()

	crashed := time.Now()
	if err := c.Crash(ctx, target); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s crashed at %s", target, crashed.Format(time.RFC3339Nano))
	var moved *corev1.Pod
	waitFor(t, ctx, "web-0 running on another node", func() (bool, error) {
		moved = runningPod(ctx, c, "default", "web-0")
		return moved != nil && moved.Spec.NodeName != target, nil
	})
	started := startedAt(moved)
	off := firstOff(t, c.BMC(target))
	t.Logf("web-0 runs on %s, started %s after the crash; %s powered off through its BMC %s after the crash",
		moved.Spec.NodeName, started.Sub(crashed).Round(100*time.Millisecond), target, off.Sub(crashed).Round(100*time.Millisecond))
	if !off.Before(started) {
		t.Fatalf("web-0 started on %s at %s, before %s's BMC powered it off at %s", moved.Spec.NodeName, started, target, off)
	}

	// An operator powers the node back on, as the BMC's owner would.
	if err := c.BMC(target).SetPower(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, target+" Ready with a new boot ID", func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return nodeReady(n) && n.Status.NodeInfo.BootID != oldBoot && len(n.Spec.Taints) == 0, nil
	})
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "back", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: target, TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "app", Image: BusyboxImage, Command: []string{"/bin/sh", "-c", "sleep 3600"}}}}}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "a pod running on "+target+" again", func() (bool, error) {
		return runningPod(ctx, c, "default", "back") != nil, nil
	})
}

// firstOff is when the BMC first cut power on a request over IPMI.
func firstOff(t *testing.T, b *bmc.IPMISim) time.Time {
	t.Helper()
	events, err := b.Events()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Action == bmc.ActionOff && e.Source == "bmc" {
			return e.Time
		}
	}
	t.Fatalf("the BMC never powered off: events %v", events)
	return time.Time{}
}
