package sim

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

func agentLease(t *testing.T, ctx context.Context, h *Harness, agent string) (renew time.Time, ok bool) {
	t.Helper()
	list, err := h.Cluster.Client.CoordinationV1().Leases(ControllerNamespace).List(ctx,
		metav1.ListOptions{LabelSelector: "fencing.kubefence.io/component=agent"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range list.Items {
		if deref(l.Spec.HolderIdentity) == agent && l.Spec.RenewTime != nil {
			return l.Spec.RenewTime.Time, true
		}
	}
	return time.Time{}, false
}

// waitRemediated crashes node and waits for its incident to be remediated.
func crashAndWait(t *testing.T, ctx context.Context, h *Harness, node string) v1alpha1.NodeFence {
	t.Helper()
	h.Cluster.Node(node).Crash()
	var nf v1alpha1.NodeFence
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, h.Cluster, node)
		if err != nil || len(incs) == 0 {
			return false, nil
		}
		nf = incs[len(incs)-1]
		return nf.Status.Phase == v1alpha1.PhaseRemediated || nf.Status.Phase == v1alpha1.PhaseFailed, nil
	})
	if err != nil || nf.Status.Phase != v1alpha1.PhaseRemediated {
		t.Fatalf("incident of %s: phase %q (%s), want Remediated: %v", node, nf.Status.Phase, nf.Status.Message, err)
	}
	return nf
}

// TestRemoteAgent: an IPMI agent serving over mutual TLS, as in a datacenter's management
// network, fences a node; the leader keeps a Lease for it while it answers. Once it stops
// answering its Lease stops renewing, and the next incident skips its level with the
// reason and escalates to the local agent.
func TestRemoteAgent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, nil)
	ra, err := h.StartRemoteAgent(ctx, "ipmi-remote", "fence-agent-ipmi")
	if err != nil {
		t.Fatal(err)
	}
	err = h.RewriteConfig(func(c *v1alpha1.Config) {
		local := c.Agents[0]
		remote := local
		remote.Name, remote.SHA256, remote.Address, remote.TLS = "ipmi-remote", "", ra.Address, &ra.TLS
		c.Agents = append(c.Agents, remote)
		all := intstr.FromString("100%")
		c.Policies[0].Budget.MaxUnhealthy = &all
		c.Policies[0].Levels = []v1alpha1.Level{{Agents: []string{"ipmi-remote"}}, {Agents: []string{local.Name}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	startLeader(t, ctx, h, "controller", "--identity-renew-interval=500ms")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, ok := agentLease(t, ctx, h, "ipmi-remote")
		return ok, nil
	})
	if err != nil {
		t.Fatalf("no Lease for the remote agent")
	}

	first := crashAndWait(t, ctx, h, "node-1")
	if first.Status.VerifiedLevel != 1 || first.Status.Attempts[0].Agent != "ipmi-remote" {
		t.Errorf("node-1 verified at level %d by %s, want level 1 by the remote agent", first.Status.VerifiedLevel, first.Status.Attempts[0].Agent)
	}

	if err := ra.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-ra.Done()
	// The Lease stops renewing: its renew time stays put across several check intervals.
	last, _ := agentLease(t, ctx, h, "ipmi-remote")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		renew, ok := agentLease(t, ctx, h, "ipmi-remote")
		if ok && renew.After(last) {
			last = renew
			return false, nil
		}
		return time.Since(last) > 2*time.Second, nil
	})
	if err != nil {
		t.Fatalf("remote agent Lease kept renewing after the agent died")
	}

	second := crashAndWait(t, ctx, h, "node-2")
	if second.Status.VerifiedLevel != 2 {
		t.Errorf("node-2 verified at level %d, want 2 (level 1's agent is down)", second.Status.VerifiedLevel)
	}
	skipped := false
	for _, s := range second.Status.Timeline {
		if s.Type == v1alpha1.StepLevelSkipped && strings.Contains(s.Message, "ipmi-remote") {
			skipped = true
			t.Logf("recorded: %s", s.Message)
		}
	}
	if !skipped {
		t.Errorf("no LevelSkipped step naming the remote agent in %+v", second.Status.Timeline)
	}
}
