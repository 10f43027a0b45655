package sim

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/app"
	"github.com/kubefence/kubefence/pkg/netfence"
	"github.com/kubefence/kubefence/pkg/podrelease"
	"github.com/kubefence/kubefence/pkg/testpoint"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// haTimings gives a configuration the short leader election timings of the HA tests.
func haTimings(c *v1alpha1.Config) {
	c.LeaderElection.LeaseDuration = metav1.Duration{Duration: haLeaseDuration}
	c.LeaderElection.RenewDeadline = metav1.Duration{Duration: haRenewDeadline}
	c.LeaderElection.RetryPeriod = metav1.Duration{Duration: haRetryPeriod}
}

// waitIncidentN waits until node has n incidents and the newest satisfies done; it
// returns that one.
func waitIncidentN(t *testing.T, ctx context.Context, h *Harness, node string, n int, done func(v1alpha1.NodeFence) bool, what string) v1alpha1.NodeFence {
	t.Helper()
	var last v1alpha1.NodeFence
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, h.Cluster, node)
		if err != nil || len(incs) != n {
			return false, nil
		}
		last = incs[n-1]
		return done(last), nil
	})
	if err != nil {
		t.Fatalf("%s: incident %d of %s is %s (%q): %v", what, n, node, last.Status.Phase, last.Status.Message, err)
	}
	return last
}

func phaseIs(p v1alpha1.Phase) func(v1alpha1.NodeFence) bool {
	return func(nf v1alpha1.NodeFence) bool { return nf.Status.Phase == p }
}

// waitExit waits for replica r to exit and checks it exited as a deposed leader does.
func waitExit(t *testing.T, ctx context.Context, r *Replica) {
	t.Helper()
	select {
	case <-r.Done():
	case <-ctx.Done():
		t.Fatal("the resumed leader never exited")
	}
	if code := r.ExitCode(); code != app.ExitDeposed {
		t.Errorf("the resumed leader exited with %d, want %d (deposed)", code, app.ExitDeposed)
	}
}

// TestDeposedLeadersLateUnfenceLiftsNothing: the leader stops (SIGSTOP, through the test
// pause point) right before its recovery's Unfence of a node fenced through a csi-addons
// NetworkFence. Its successor recovers the node, the node fails again, and the successor
// fences it through a NetworkFence of the new incident. When the old leader wakes, it
// must send nothing: the node, alive and cut off, keeps its storage fence while its pods
// run elsewhere. The driver's blocklist and csi-addons' own record are the ground truth.
func TestDeposedLeadersLateUnfenceLiftsNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	h := fastHarnessWith(t, ctx, HarnessOptions{
		Cluster: func(o *Options) {
			for i := range o.Nodes {
				o.Nodes[i].ExternalIP = storageIP(i + 1)
			}
		},
		Config: func(cfg *v1alpha1.Config) {
			haTimings(cfg)
			cfg.Agents = append(cfg.Agents, v1alpha1.Agent{Name: storageAgent, Timeout: metav1.Duration{Duration: time.Minute},
				NetworkFence: &v1alpha1.NetworkFence{Driver: testCSIDriver, Parameters: map[string]string{"clusterID": storageCluster},
					Secret: &v1alpha1.SecretRef{Namespace: ControllerNamespace, Name: storageSecret}, AddressTypes: []string{v1alpha1.AddressExternalIP}}})
			// The storage fence alone: the machine keeps running, cut off from its volumes.
			cfg.Policies[0].Levels = []v1alpha1.Level{{Agents: []string{storageAgent}, Timeout: metav1.Duration{Duration: 2 * time.Minute}}}
			// The node fails again right after its recovery.
			cfg.Policies[0].Budget.Cooldown = metav1.Duration{Duration: time.Second}
		},
	})
	addons, err := StartCSIAddons(ctx, h.Cluster, t.TempDir(), testCSIDriver, "clusterID")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = addons.Stop() })
	victim := deployWeb(t, ctx, h.Cluster)
	var index int
	if _, err := fmt.Sscanf(victim, "node-%d", &index); err != nil {
		t.Fatal(err)
	}
	cidr := storageIP(index) + "/32"
	leader, newID := leaderAndStandby(t, ctx, h, testpoint.BeforeUnfence)

	h.Cluster.Node(victim).Crash()
	first := waitReleased(t, ctx, h, victim)
	h.Cluster.Node(victim).Restart()
	pollLog(t, ctx, leader, `"Pausing at test point" point="`+testpoint.BeforeUnfence+`"`)
	waitHolder(t, ctx, h, newID)
	waitIncidentN(t, ctx, h, victim, 1, phaseIs(v1alpha1.PhaseRecovered), "the successor's recovery")
	if _, blocked := addons.Driver.Blocked()[cidr]; blocked {
		t.Fatalf("%s still blocked after the successor recovered %s", cidr, first.Name)
	}

	// The node fails again; the successor fences it with a NetworkFence of the new incident.
	h.Cluster.Node(victim).Crash()
	second := waitIncidentN(t, ctx, h, victim, 2, phaseIs(v1alpha1.PhaseRemediated), "the second incident")
	if _, blocked := addons.Driver.Blocked()[cidr]; !blocked {
		t.Fatalf("incident %s remediated, but %s is not blocked", second.Name, cidr)
	}
	opsBefore := len(addons.Driver.Ops())
	if err := leader.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitExit(t, ctx, leader)
	// The deposed leader is gone: whatever it did is done. The fence stands.
	if _, blocked := addons.Driver.Blocked()[cidr]; !blocked {
		t.Errorf("the deposed leader's late Unfence lifted %s's storage fence while incident %s holds it", victim, second.Name)
	}
	for _, op := range addons.Driver.Ops()[opsBefore:] {
		t.Errorf("the driver was called after the deposed leader woke: %s %v at %s", op.Method, op.CIDRs, op.At.Format(time.RFC3339Nano))
	}
	checkNetworkFenceOf(t, ctx, h.Cluster, second.Name)
	if nf := waitIncidentN(t, ctx, h, victim, 2, func(v1alpha1.NodeFence) bool { return true }, "the second incident"); nf.Status.Phase != v1alpha1.PhaseRemediated {
		t.Errorf("incident %s is %s after the deposed leader woke, want Remediated", nf.Name, nf.Status.Phase)
	}
	if strings.Contains(leader.Log(), `step="`+v1alpha1.StepUnfenced+`"`) {
		t.Errorf("the deposed leader recorded an Unfence")
	}
}

// checkNetworkFenceOf checks that incident's NetworkFence is there and Fenced.
func checkNetworkFenceOf(t *testing.T, ctx context.Context, c *Cluster, incident string) {
	t.Helper()
	dyn, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	list, err := dyn.Resource(netfence.Resource).List(ctx, metav1.ListOptions{LabelSelector: netfence.IncidentLabel + "=" + v1alpha1.LabelValue(incident)})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d NetworkFences of incident %s, want 1", len(list.Items), incident)
	}
	if state, _, _ := unstructured.NestedString(list.Items[0].Object, "spec", "fenceState"); state != "Fenced" {
		t.Errorf("NetworkFence %s of incident %s is %s, want Fenced", list.Items[0].GetName(), incident, state)
	}
}

// TestLeaderKilledBeforeItsReleaseRecord: the leader is killed after it released a node
// (taints, pods) and before it recorded the release, where a storm's release gate holds
// the record back; the node's BMC died with it, so the successor cannot read the fence
// back. The successor records the release from the taints' owner mark and ends the
// incident Remediated, never Failed with "nothing was released" (after which the orphan
// repair would have removed the taints of a released node).
func TestLeaderKilledBeforeItsReleaseRecord(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := fastHarnessWith(t, ctx, HarnessOptions{Config: haTimings})
	victim := deployWeb(t, ctx, h.Cluster)
	leader, newID := leaderAndStandby(t, ctx, h, testpoint.BeforeRecord)

	h.Cluster.Node(victim).Crash()
	pollLog(t, ctx, leader, `"Pausing at test point" point="`+testpoint.BeforeRecord+`"`)
	if err := h.BMCs[victim].Stop(); err != nil {
		t.Fatal(err)
	}
	agents := childPIDs(leader.p.pid())
	if err := leader.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-leader.Done()
	for _, pid := range agents {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitHolder(t, ctx, h, newID)
	nf := waitIncidentN(t, ctx, h, victim, 1, func(nf v1alpha1.NodeFence) bool {
		return !nf.Status.Phase.Open() || nf.Status.Phase == v1alpha1.PhaseRemediated
	},
		"the successor's record")
	if nf.Status.Phase != v1alpha1.PhaseRemediated {
		t.Fatalf("incident %s ended %s (%q), want Remediated: the node was released", nf.Name, nf.Status.Phase, nf.Status.Message)
	}
	found := false
	for _, s := range nf.Status.Timeline {
		found = found || (s.Type == v1alpha1.StepReleaseFound && strings.Contains(s.Message, podrelease.OwnerAnnotation))
	}
	if !found {
		t.Errorf("no %s step citing the owner mark in %+v", v1alpha1.StepReleaseFound, nf.Status.Timeline)
	}
	if got := nf.Status.Remediation.TaintsAdded; !slices.Contains(got, podrelease.FencedTaint.Key) || !slices.Contains(got, podrelease.OutOfServiceTaint.Key) {
		t.Errorf("taints recorded %v, want both the released node carries", got)
	}
	if keys := taintKeys(t, ctx, h.Cluster, victim); !slices.Contains(keys, podrelease.OutOfServiceTaint.Key) {
		t.Errorf("the released node's taints %v lost %s", keys, podrelease.OutOfServiceTaint.Key)
	}
}

// TestWrongMappingNeverVerifies: the node's IPMI annotation names a spare machine's BMC,
// unique and switched off, whose GUID cannot tell it from the node's own (the spare's
// board carries the same one, as cloned firmware does: a device that differs is refused
// before the first off, TestMismatchedDeviceHoldsTheFence). The leader's first check of every fence device reads it off
// while the node renews its Lease, so the node is marked and its fencing held: when the
// node then dies, nothing is powered off and nothing released (a fence would have read
// the spare back as off and released the pods of a running machine). A person fixes the
// mapping and removes the mark, as the runbook says; the node is then fenced through its
// own BMC.
func TestWrongMappingNeverVerifies(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := fastHarnessWith(t, ctx, HarnessOptions{})
	dir := t.TempDir()
	victim := deployWeb(t, ctx, h.Cluster)
	spare, err := bmc.StartIPMI(ctx, bmc.IPMIOptions{Dir: filepath.Join(dir, "spare"), PoweredOn: false, GUID: h.BMCs[victim].GUID()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = spare.Stop() })
	nodes := h.Cluster.Client.CoreV1().Nodes()
	own, err := nodes.Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setAnnotation(t, ctx, h, victim, IPMIAddressKey, fmt.Sprintf("%s:%d", spare.Host(), spare.Port()))
	startLeader(t, ctx, h, "controller")

	var mark string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := nodes.Get(ctx, victim, metav1.GetOptions{})
		mark = n.Annotations[v1alpha1.TargetReadsOffAnnotation]
		return err == nil && mark != "", nil
	})
	if err != nil {
		t.Fatalf("node %s never marked while its mapped device reads off: %v", victim, err)
	}
	t.Logf("marked: %s", mark)
	h.Cluster.Node(victim).Crash()
	nf := waitIncidentN(t, ctx, h, victim, 1, phaseIs(v1alpha1.PhaseHeld), "the hold")
	if !strings.Contains(nf.Status.Message, spare.Host()) {
		t.Errorf("held with %q, want the device that read off named", nf.Status.Message)
	}
	if events, err := spare.Events(); err != nil || len(events) > 0 {
		t.Errorf("the spare's BMC log %v (%v), want nothing asked of it", events, err)
	}

	// The fix, as the runbook says: the node's own BMC, then the mark removed.
	setAnnotation(t, ctx, h, victim, IPMIAddressKey, own.Annotations[IPMIAddressKey])
	setAnnotation(t, ctx, h, victim, v1alpha1.TargetReadsOffAnnotation, "")
	waitReleased(t, ctx, h, victim)
	off := false
	events, err := h.BMCs[victim].Events()
	for _, e := range events {
		off = off || e.Action == bmc.ActionOff
	}
	if err != nil || !off {
		t.Errorf("the node's own BMC log %v (%v), want its power-off", events, err)
	}
}

// setAnnotation sets (or, with "", removes) an annotation of node with a merge patch, as
// `kubectl annotate` does.
func setAnnotation(t *testing.T, ctx context.Context, h *Harness, node, key, value string) {
	t.Helper()
	v := "null"
	if value != "" {
		v = fmt.Sprintf("%q", value)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, v)
	if _, err := h.Cluster.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// leaderAndStandby starts a replica that pauses at point and, once it leads, a standby;
// it returns the leader and the standby's identity.
func leaderAndStandby(t *testing.T, ctx context.Context, h *Harness, point string) (*Replica, string) {
	t.Helper()
	leader, err := h.StartControllerWithEnv("leader", []string{testpoint.Env + "=" + point})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	standby, err := h.StartController("standby")
	if err != nil {
		t.Fatal(err)
	}
	return leader, identityOf(t, ctx, standby)
}
