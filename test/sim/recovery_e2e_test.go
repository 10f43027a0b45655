package sim

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/podrelease"
)

const (
	outOfService = "node.kubernetes.io/out-of-service"
	fencedTaint  = "fencing.kubefence.io/fenced"
	personTaint  = "example.com/maintenance"
)

// fencedVictim runs the walking skeleton up to a remediated incident and returns the
// harness, the victim and its incident.
func fencedVictim(t *testing.T, ctx context.Context, beforeCrash func(h *Harness, victim string)) (*Harness, string, v1alpha1.NodeFence) {
	t.Helper()
	h := fastHarness(t, ctx, nil)
	victim := deployWeb(t, ctx, h.Cluster)
	if beforeCrash != nil {
		beforeCrash(h, victim)
	}
	startLeader(t, ctx, h, "controller")
	h.Cluster.Node(victim).Crash()
	return h, victim, waitReleased(t, ctx, h, victim)
}

func addTaint(t *testing.T, ctx context.Context, c *Cluster, node string, taint corev1.Taint) {
	t.Helper()
	// The simulated kubelet updates its Node too: retry on conflict, as kubectl does.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, taint)
		_, err = c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func taintKeys(t *testing.T, ctx context.Context, c *Cluster, node string) []string {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, tn := range n.Spec.Taints {
		keys = append(keys, tn.Key)
	}
	return keys
}

// powerOn switches the fenced node on again once the simulated machine has seen it go off,
// so that it boots anew.
func powerOn(t *testing.T, ctx context.Context, h *Harness, node string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return h.Cluster.Node(node).PoweredOff(), nil
	})
	if err != nil {
		t.Fatalf("simulated machine %s never went off: %v", node, err)
	}
	if err := h.BMCs[node].SetPower(true); err != nil {
		t.Fatal(err)
	}
}

// waitOnlyIncident polls until node has exactly one incident and done holds for it. It
// returns that incident as last seen, for the caller's message when the poll failed.
func waitOnlyIncident(ctx context.Context, h *Harness, node string, done func(v1alpha1.NodeFence) bool) (v1alpha1.NodeFence, error) {
	var last v1alpha1.NodeFence
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, h.Cluster, node)
		if err != nil || len(incs) != 1 {
			return false, nil
		}
		last = incs[0]
		return done(last), nil
	})
	return last, err
}

func recovered(nf v1alpha1.NodeFence) bool { return nf.Status.Phase == v1alpha1.PhaseRecovered }

// TestRecoveryAfterPowerOn: the fenced node is powered on, boots with a new boot ID and
// heartbeats again; kubefence closes the incident and removes exactly the taints it added,
// leaving a person's taint alone.
func TestRecoveryAfterPowerOn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h, victim, nf := fencedVictim(t, ctx, func(h *Harness, victim string) {
		addTaint(t, ctx, h.Cluster, victim, corev1.Taint{Key: personTaint, Value: "yes", Effect: corev1.TaintEffectNoSchedule})
	})
	if got := taintKeys(t, ctx, h.Cluster, victim); !slices.Contains(got, outOfService) || !slices.Contains(got, fencedTaint) {
		t.Fatalf("fenced node taints %v, want %s and %s", got, outOfService, fencedTaint)
	}
	oldBoot := nf.Status.BootID
	powerOn(t, ctx, h, victim)
	final, err := waitOnlyIncident(ctx, h, victim, recovered)
	if err != nil {
		t.Fatalf("incident not recovered after power on: phase %s, %v", final.Status.Phase, err)
	}
	if b := h.Cluster.Node(victim).BootID(); b == oldBoot {
		t.Errorf("node came back with the old boot ID %s", b)
	}
	got := taintKeys(t, ctx, h.Cluster, victim)
	if slices.Contains(got, outOfService) || slices.Contains(got, fencedTaint) {
		t.Errorf("taints after recovery %v: kubefence's taints were not removed", got)
	}
	if !slices.Contains(got, personTaint) {
		t.Errorf("taints after recovery %v: the person's taint %s was removed", got, personTaint)
	}
	if len(final.Status.Remediation.TaintsAdded) != 0 {
		t.Errorf("incident still records taints %v after recovery", final.Status.Remediation.TaintsAdded)
	}
	// The owner mark the release put on the node with its taints goes with them.
	node, err := h.Cluster.Client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if mark, ok := node.Annotations[podrelease.OwnerAnnotation]; ok {
		t.Errorf("owner mark %q left on the recovered node", mark)
	}
}

// TestPersonOutOfServiceTaintKept: an out-of-service taint a person put on the node before
// the incident is not kubefence's and stays after recovery.
func TestPersonOutOfServiceTaintKept(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h, victim, nf := fencedVictim(t, ctx, func(h *Harness, victim string) {
		// A NoExecute taint evicts web-0 from the node; the node is crashed all the same,
		// fenced, and must come back with the person's taint.
		addTaint(t, ctx, h.Cluster, victim, corev1.Taint{Key: outOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	})
	if slices.Contains(nf.Status.Remediation.TaintsAdded, outOfService) {
		t.Fatalf("incident claims the person's out-of-service taint: %v", nf.Status.Remediation.TaintsAdded)
	}
	powerOn(t, ctx, h, victim)
	_, err := waitOnlyIncident(ctx, h, victim, recovered)
	if err != nil {
		t.Fatalf("incident not recovered: %v", err)
	}
	got := taintKeys(t, ctx, h.Cluster, victim)
	if !slices.Contains(got, outOfService) || slices.Contains(got, fencedTaint) {
		t.Errorf("taints after recovery %v, want the person's %s kept and %s removed", got, outOfService, fencedTaint)
	}
}

// TestSameBootAfterFenceIsContradiction: the BMC reported off but the machine kept running
// (the false "off" of a broken BMC); when its kubelet comes back with the same boot ID,
// kubefence raises the contradiction loudly and undoes nothing.
func TestSameBootAfterFenceIsContradiction(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h, victim, nf := fencedVictim(t, ctx, func(h *Harness, victim string) { h.MachineIgnoresBMC(victim) })
	h.Cluster.Node(victim).Resume()
	final, err := waitOnlyIncident(ctx, h, victim, func(nf v1alpha1.NodeFence) bool {
		return meta.IsStatusConditionTrue(nf.Status.Conditions, v1alpha1.ConditionContradiction)
	})
	if err != nil {
		t.Fatalf("no FenceContradicted condition on the incident: %+v", final.Status.Conditions)
	}
	if final.Status.Phase != v1alpha1.PhaseRemediated || final.Status.BootID != nf.Status.BootID {
		t.Errorf("phase %s, want Remediated kept open for a person", final.Status.Phase)
	}
	if got := taintKeys(t, ctx, h.Cluster, victim); !slices.Contains(got, outOfService) {
		t.Errorf("taints %v: kubefence undid the fence of a contradicted node", got)
	}
	// The Event goes out after the status write that raised the condition, from the
	// recorder's own goroutine: it may reach the API server a moment after the condition.
	eventually(t, 30*time.Second, "a FenceContradicted event", func() (bool, error) {
		events, err := h.Cluster.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + v1alpha1.ReasonFenceContradicted})
		return err == nil && len(events.Items) > 0, err
	})
}
