package realnode

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Rounds and seed of TestDisturbancesNeverFenceHealthyRealNodes: a few rounds in
// make test, more with make chaos-realnode (ROUNDS, SEED).
func disturbanceSettings(t *testing.T) (rounds int, seed uint64) {
	rounds, seed = 4, uint64(time.Now().UnixNano())
	if v := os.Getenv("KUBEFENCE_REALNODE_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("KUBEFENCE_REALNODE_ROUNDS=%q: want a positive number", v)
		}
		rounds = n
	}
	if v := os.Getenv("KUBEFENCE_REALNODE_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("KUBEFENCE_REALNODE_SEED=%q: want a number", v)
		}
		seed = n
	}
	return rounds, seed
}

// TestDisturbancesNeverFenceHealthyRealNodes, on real kubelets: every node stays alive and
// renews its Lease while the controller is disturbed the way upgrades, drains and bad luck
// disturb it (one replica or both deleted, a rollout restart, a replica frozen for
// seconds), next to a PDB-guarded single replica on one
// node, pods that tolerate an unreachable node for only seconds, and a Deployment scaled
// up and down. No NodeFence may be created and no BMC may see a power request.
func TestDisturbancesNeverFenceHealthyRealNodes(t *testing.T) {
	rounds, seed := disturbanceSettings(t)
	t.Logf("seed %d, %d rounds (replay: KUBEFENCE_REALNODE_SEED=%d KUBEFENCE_REALNODE_ROUNDS=%d)", seed, rounds, seed, rounds)
	rng := rand.New(rand.NewPCG(seed, seed))
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute+time.Duration(rounds)*time.Minute)
	defer cancel()
	install(t, ctx, c)
	guarded(t, ctx, c, "node-3")

	actions := []struct {
		name string
		do   func() string
	}{
		{"delete one replica", func() string { return deleteReplicas(t, ctx, c, rng, false) }},
		{"delete both replicas", func() string { return deleteReplicas(t, ctx, c, rng, true) }},
		{"rollout restart", func() string { return rolloutRestart(t, ctx, c) }},
		{"freeze a replica", func() string { return freezeReplica(t, ctx, c, rng) }},
		{"scale", func() string { return scaleFiller(t, ctx, c, rng) }},
		{"short toleration pod", func() string { return tolerationPod(t, ctx, c, rng) }},
	}
	for i := range rounds {
		a := actions[rng.IntN(len(actions))]
		what := a.do()
		pause := time.Duration(1+rng.IntN(12)) * time.Second
		t.Logf("round %d: %s: %s; then %s", i, a.name, what, pause)
		noFence(t, ctx, c)
		if err := sleepCtx(ctx, pause); err != nil {
			t.Fatal(err)
		}
		noFence(t, ctx, c)
	}
	// A decision can trail a disturbance by the detection threshold and the evidence
	// floor: watch for one Lease duration (40s) and a threshold (30s) more.
	quiet := time.Now().Add(70 * time.Second)
	waitFor(t, ctx, "a quiet 70s after the last disturbance", func() (bool, error) {
		noFence(t, ctx, c)
		return time.Now().After(quiet), nil
	})
	t.Logf("seed %d: %d rounds, 0 NodeFences, 0 BMC power requests", seed, rounds)
}

// sleepCtx paces the disturbances (it waits for no condition).
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// noFence fails the test at the first NodeFence or BMC power request.
func noFence(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	for _, n := range c.Nodes() {
		nfs, err := c.NodeFences(ctx, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if len(nfs) > 0 {
			t.Fatalf("healthy node %s got NodeFence %s (phase %s)", n.Name, nfs[0].GetName(), phaseOf(nfs[0]))
		}
		events, err := c.BMC(n.Name).Events()
		if err != nil {
			t.Fatal(err)
		}
		if len(events) > 0 {
			t.Fatalf("healthy node %s's BMC got power requests: %+v", n.Name, events)
		}
		if !n.Running() {
			t.Fatalf("node %s is not running", n.Name)
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !nodeReady(node) {
			t.Fatalf("node %s is not Ready: this run is about nodes that stay alive", n.Name)
		}
	}
}

// guarded runs a single replica on node, guarded by a PodDisruptionBudget with
// minAvailable 1: the budget has no disruption to allow, which made the node "urgent".
func guarded(t *testing.T, ctx context.Context, c *Cluster, node string) {
	t.Helper()
	labels := map[string]string{"app": "guarded"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Affinity: prefer(node), TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{Name: "app", Image: BusyboxImage, Command: []string{"/bin/sh", "-c", "sleep 86400"}}}},
			},
		},
	}
	if _, err := c.Client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the guarded replica running", func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=guarded"})
		return err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning, err
	})
}

func controllerPods(t *testing.T, ctx context.Context, c *Cluster) []corev1.Pod {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

func deleteReplicas(t *testing.T, ctx context.Context, c *Cluster, rng *rand.Rand, both bool) string {
	pods := controllerPods(t, ctx, c)
	if len(pods) == 0 {
		return "no replica to delete"
	}
	if !both {
		i := rng.IntN(len(pods))
		pods = pods[i : i+1]
	}
	var names []string
	for _, p := range pods {
		if err := c.Client.CoreV1().Pods(Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name+" on "+p.Spec.NodeName)
	}
	return "deleted " + strings.Join(names, ", ")
}

func rolloutRestart(t *testing.T, ctx context.Context, c *Cluster) string {
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`,
		time.Now().Format(time.RFC3339Nano))
	if _, err := c.Client.AppsV1().Deployments(Namespace).Patch(ctx, controllerName, types.StrategicMergePatchType,
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return "patched the Deployment's template"
}

// freezeReplica freezes one replica's pod cgroup (the controller process stops where it
// stands) for 2-10s.
func freezeReplica(t *testing.T, ctx context.Context, c *Cluster, rng *rand.Rand) string {
	pods := controllerPods(t, ctx, c)
	if len(pods) == 0 {
		return "no replica to freeze"
	}
	p := pods[rng.IntN(len(pods))]
	n := c.Node(p.Spec.NodeName)
	if n == nil {
		return p.Name + " is not scheduled"
	}
	dir := podCgroup(n, string(p.UID))
	if dir == "" {
		return p.Name + " has no cgroup yet"
	}
	d := time.Duration(2+rng.IntN(9)) * time.Second
	if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("FROZEN"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := sleepCtx(ctx, d)
	// Thawed even when the pod went meanwhile: a missing cgroup is fine.
	_ = os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("froze %s on %s for %s", p.Name, n.Name, d)
}

// podCgroup is the freezer cgroup of the pod with uid on n, or "".
func podCgroup(n *Node, uid string) string {
	want := "pod" + uid
	var found string
	_ = filepath.WalkDir(filepath.Join(cgroupRoot, "freezer", n.cgroup()), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == want {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

func scaleFiller(t *testing.T, ctx context.Context, c *Cluster, rng *rand.Rand) string {
	replicas := int32(rng.IntN(5))
	d, err := c.Client.AppsV1().Deployments("default").Get(ctx, "filler", metav1.GetOptions{})
	if err != nil {
		labels := map[string]string{"app": "filler"}
		d = &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "filler", Namespace: "default"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(replicas),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](1),
						Containers: []corev1.Container{{Name: "app", Image: BusyboxImage, Command: []string{"/bin/sh", "-c", "sleep 86400"}}}},
				},
			},
		}
		if _, err := c.Client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("created filler with %d replicas", replicas)
	}
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := c.Client.AppsV1().Deployments("default").Patch(ctx, "filler", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("scaled filler to %d", replicas)
}

// tolerationPod creates a pod that tolerates an unreachable or not-ready node for only
// 1-5s, or deletes the one there is.
func tolerationPod(t *testing.T, ctx context.Context, c *Cluster, rng *rand.Rand) string {
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, "short", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err == nil {
		return "deleted the short-toleration pod"
	}
	secs := int64(1 + rng.IntN(5))
	node := c.Nodes()[rng.IntN(len(c.Nodes()))].Name
	tol := func(key string) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(secs)}
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "short", Namespace: "default"},
		Spec: corev1.PodSpec{Affinity: prefer(node), TerminationGracePeriodSeconds: ptr.To[int64](1),
			Tolerations: []corev1.Toleration{tol("node.kubernetes.io/unreachable"), tol("node.kubernetes.io/not-ready")},
			Containers:  []corev1.Container{{Name: "app", Image: BusyboxImage, Command: []string{"/bin/sh", "-c", "sleep 86400"}}}}}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return "the short-toleration pod is still going: " + err.Error()
	}
	return fmt.Sprintf("created a pod tolerating an unreachable node for %ds, preferring %s", secs, node)
}
