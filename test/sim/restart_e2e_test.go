package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// restartRenew is the kubelets' renewal period in TestControllerRestartsNeverFenceHealthyNode:
// long against minWait, as a real kubelet's 10s is against the default 5s.
const restartRenew = 2 * time.Second

// TestControllerRestartsNeverFenceHealthyNode: a single-replica Deployment guarded by a
// PodDisruptionBudget with no disruption left (which shortens the wait to minWait) runs on a healthy node, and both controller replicas are restarted, 20
// times, with varied timing: both terminated at once or one after the other, killed, or a
// mix, and the new ones started together or apart. Every node renews its Lease on time
// throughout; no NodeFence may be created and no BMC may be asked for anything.
func TestControllerRestartsNeverFenceHealthyNode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	h := fastHarnessWith(t, ctx, HarnessOptions{
		Cluster: func(o *Options) { o.LeaseRenewInterval, o.StatusUpdateInterval = restartRenew, restartRenew },
		Config: func(c *v1alpha1.Config) {
			c.Detection.LeaseStaleAfter = metav1.Duration{Duration: 3 * restartRenew}
			c.Detection.NotReadyAfter = metav1.Duration{Duration: 3 * restartRenew}
			c.LeaderElection.LeaseDuration = metav1.Duration{Duration: haLeaseDuration}
			c.LeaderElection.RenewDeadline = metav1.Duration{Duration: haRenewDeadline}
			c.LeaderElection.RetryPeriod = metav1.Duration{Duration: haRetryPeriod}
			for i := range c.Policies {
				c.Policies[i].MinWait = metav1.Duration{Duration: 500 * time.Millisecond}
			}
		},
	})
	guarded := deployGuarded(t, ctx, h.Cluster, "guarded")
	var others []string
	for _, n := range h.Cluster.Nodes() {
		if n.Name() != guarded {
			others = append(others, n.Name())
		}
	}
	const rounds = 20
	rng := rand.New(rand.NewPCG(17, 20))
	var live []*Replica
	for round := range rounds {
		live = restartReplicas(t, ctx, h, rng, round, live, others)
		// Watch through three renewal periods of every node, and the evidence floor.
		watchUntil := time.Now().Add(4 * restartRenew)
		for time.Now().Before(watchUntil) {
			if bad := fencedAnything(ctx, h); bad != "" {
				t.Fatalf("round %d (guarded pod on %s): %s\nleader log:\n%s", round, guarded, bad, tail(live))
			}
			if err := sleepUntil(ctx, time.Now().Add(200*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if bad := fencedAnything(ctx, h); bad != "" {
		t.Fatalf("after %d rounds: %s", rounds, bad)
	}
	t.Logf("%d rounds of controller restarts: no NodeFence, no BMC action", rounds)
}

// deployGuarded runs a one-replica Deployment whose PodDisruptionBudget (minAvailable 1)
// allows no disruption, and returns the node of its pod.
func deployGuarded(t *testing.T, ctx context.Context, c *Cluster, name string) string {
	t.Helper()
	if err := c.Deploy(ctx, name, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.GuardWithPDB(ctx, name, 1); err != nil {
		t.Fatal(err)
	}
	pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of %s: %d, %v", name, len(pods.Items), err)
	}
	return pods.Items[0].Spec.NodeName
}

// restartReplicas stops the live replicas in one of the ways a rollout, an upgrade or a
// drain does, starts two new ones on the nodes given, and waits until one leads.
func restartReplicas(t *testing.T, ctx context.Context, h *Harness, rng *rand.Rand, round int, live []*Replica, nodes []string) []*Replica {
	t.Helper()
	gap := func() time.Duration { return time.Duration(rng.IntN(2000)) * time.Millisecond }
	for _, r := range live {
		var err error
		if rng.IntN(4) == 0 {
			err = r.Signal(syscall.SIGKILL)
		} else {
			err = r.Terminate()
		}
		if err != nil {
			t.Fatal(err)
		}
		if rng.IntN(2) == 0 {
			<-r.Done()
		}
		if err := sleepUntil(ctx, time.Now().Add(gap()/2)); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range live {
		select {
		case <-r.Done():
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	if err := sleepUntil(ctx, time.Now().Add(gap())); err != nil {
		t.Fatal(err)
	}
	var next []*Replica
	for i, node := range nodes[:2] {
		r, err := h.StartController(fmt.Sprintf("ctl-%d-%d", round, i), "--node-name", node)
		if err != nil {
			t.Fatal(err)
		}
		next = append(next, r)
		if err := sleepUntil(ctx, time.Now().Add(gap()/2)); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, r := range next {
			if strings.Contains(r.Log(), "Acting as leader") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("round %d: no new replica took the lead: %v", round, err)
	}
	return next
}

// fencedAnything reports any NodeFence and any power action asked of any BMC.
func fencedAnything(ctx context.Context, h *Harness) string {
	var bad []string
	dyn, err := dynamicClient(h.Cluster)
	if err != nil {
		return "dynamic client: " + err.Error()
	}
	nfs, err := dyn.Resource(v1alpha1.NodeFenceResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "list NodeFences: " + err.Error()
	}
	for _, nf := range nfs.Items {
		node, _, _ := unstructured.NestedString(nf.Object, "spec", "nodeName")
		phase, _, _ := unstructured.NestedString(nf.Object, "status", "phase")
		bad = append(bad, fmt.Sprintf("NodeFence %s for healthy node %s (phase %s)", nf.GetName(), node, phase))
	}
	for name, b := range h.BMCs {
		events, err := b.Events()
		if err != nil {
			return "read BMC events of " + name + ": " + err.Error()
		}
		for _, e := range events {
			if e.Action != bmc.ActionOn {
				bad = append(bad, fmt.Sprintf("BMC of healthy node %s: %s at %s", name, e.Action, e.Time.Format(time.RFC3339Nano)))
			}
		}
	}
	return strings.Join(bad, "; ")
}

func tail(rs []*Replica) string {
	var out []string
	for _, r := range rs {
		lines := strings.Split(r.Log(), "\n")
		out = append(out, strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
	return strings.Join(out, "\n---\n")
}

// TestFreshInstallOpensNoIncident: a fresh install on 10 nodes, as the chart makes it:
// two controller replicas whose PodDisruptionBudget (minAvailable 1) allows no
// disruption while they start, so the nodes they run on count as urgent, with fresh
// leaders that have not yet seen any node's Lease renew. Every node is healthy: no
// incident may open and no BMC may be asked for anything. Incidents were once opened
// against the two nodes hosting the replicas at the first install.
func TestFreshInstallOpensNoIncident(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	h := fastHarnessWith(t, ctx, HarnessOptions{
		Nodes:   10,
		Cluster: func(o *Options) { o.LeaseRenewInterval, o.StatusUpdateInterval = restartRenew, restartRenew },
		Config: func(c *v1alpha1.Config) {
			c.Detection.LeaseStaleAfter = metav1.Duration{Duration: 3 * restartRenew}
			c.Detection.NotReadyAfter = metav1.Duration{Duration: 3 * restartRenew}
			for i := range c.Policies {
				c.Policies[i].MinWait = metav1.Duration{Duration: 500 * time.Millisecond}
				// No storm hold to hide behind: each node is judged on its own.
				all := intstr.FromString("100%")
				c.Policies[i].Budget.MaxUnhealthy = &all
			}
		},
	})
	// The chart's replicas, as pods the scheduler places, guarded by the chart's budget.
	if err := h.Cluster.Deploy(ctx, "kubefence", 2); err != nil {
		t.Fatal(err)
	}
	if err := h.Cluster.GuardWithPDB(ctx, "kubefence", 2); err != nil {
		t.Fatal(err)
	}
	pods, err := h.Cluster.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=kubefence"})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("controller pods: %v", err)
	}
	for i, p := range pods.Items {
		if _, err := h.StartController(fmt.Sprintf("install-%d", i), "--node-name", p.Spec.NodeName); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	// Through the evidence floor of a fresh leader (the Leases' 8s duration) and well past
	// three renewal periods after it.
	watchUntil := time.Now().Add(6 * restartRenew)
	for time.Now().Before(watchUntil) {
		if bad := fencedAnything(ctx, h); bad != "" {
			t.Fatalf("fresh install: %s", bad)
		}
		if err := sleepUntil(ctx, time.Now().Add(200*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
}
