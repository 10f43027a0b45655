package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/policy"
)

// wrongMapping is a fixture whose node-1 names bmc-spare, a spare machine's BMC that
// reads off, as its fence device; every node renews at f0.
func wrongMapping(t *testing.T) *fixture {
	t.Helper()
	objs := threeNodes()
	objs[0].(*corev1.Node).Annotations["bmc"] = "bmc-spare"
	f := newFixture(t, fixtureConfig(), objs...)
	f.bmc.readsOff = map[string]bool{"bmc-spare": true}
	f.renewAllBut()
	return f
}

// monitorRound reads every node's first-level device, as the leader's monitor does.
func (f *fixture) monitorRound() {
	f.t.Helper()
	nodes, err := f.c.nodes.List(everything())
	if err != nil {
		f.t.Fatal(err)
	}
	f.c.recordTargets(context.Background(), f.c.caller.checkTargets(context.Background(), f.c.cfg.Policies, nodes))
	f.bmc.calls = nil // one Status call per node, in no set order
}

func (f *fixture) mark(node string) string {
	f.t.Helper()
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	f.kube.ClearActions()
	if err != nil {
		f.t.Fatal(err)
	}
	return n.Annotations[v1alpha1.TargetReadsOffAnnotation]
}

// TestTargetReadsOffHoldsTheFence: a node's fence device that reads off while the node
// renews its Lease after the read is another machine's. The node is marked, an Event
// says so, and when the node dies its incident is held: a fence through that device
// would "verify" without touching the node and release its pods while it runs.
func TestTargetReadsOffHoldsTheFence(t *testing.T) {
	f := wrongMapping(t)
	f.monitorRound()
	// A renewal within the margin proves nothing (its power may have been cut a moment
	// before the read); one after it does.
	f.now = f0.Add(5 * time.Second)
	f.renewAllBut()
	f.sync("node-1")
	if m := f.mark("node-1"); m != "" {
		t.Fatalf("marked on a renewal 5s after the read: %q", m)
	}
	f.now = f0.Add(30 * time.Second)
	f.renewAllBut()
	// The API server has node-1's last renewal too (the live read before an incident).
	if _, err := f.kube.CoordinationV1().Leases(NodeLeaseNamespace).Update(context.Background(), fixtureLease("node-1", f.now), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.kube.ClearActions()
	f.sync("node-1")
	m := f.mark("node-1")
	if !strings.Contains(m, "agent ipmi read target bmc-spare off") {
		t.Fatalf("mark %q, want one naming the agent and target", m)
	}
	f.expectEvents(v1alpha1.ReasonTargetReadsOff)
	if n := testutil.ToFloat64(f.c.offReads.gauge.WithLabelValues("node-1", "ipmi")); n != 1 {
		t.Errorf("kubefence_target_reads_off{node-1,ipmi} = %v, want 1", n)
	}
	f.catchUp("node-1")
	// node-1 dies: its incident is held, nothing is fenced or released.
	f.now = f0.Add(2 * time.Minute)
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectCalls()
	nf := f.incident("node-1")
	if nf.Status.Phase != v1alpha1.PhaseHeld || !strings.Contains(nf.Status.Message, "bmc-spare") {
		t.Fatalf("incident %s (%q), want Held for the device that read off", nf.Status.Phase, nf.Status.Message)
	}
	if holds := stepsOf(nf, v1alpha1.StepHold); len(holds) == 0 || !strings.HasPrefix(holds[0], policy.ReasonTargetReadsOff) {
		t.Errorf("hold steps %q, want %s", holds, policy.ReasonTargetReadsOff)
	}
}

// TestTargetReadsOffClearedOnceFixed: once the mapping names the node's own device and it
// reads on, the next monitor round removes the mark.
func TestTargetReadsOffClearedOnceFixed(t *testing.T) {
	f := wrongMapping(t)
	f.monitorRound()
	f.now = f0.Add(30 * time.Second)
	f.renewAllBut()
	f.sync("node-1")
	if f.mark("node-1") == "" {
		t.Fatal("not marked")
	}
	f.catchUp("node-1")
	n, _ := f.c.nodes.Get("node-1")
	fixed := n.DeepCopy()
	fixed.Annotations["bmc"] = "bmc-node-1"
	f.cache(fixed)
	f.monitorRound()
	if m := f.mark("node-1"); m != "" {
		t.Errorf("mark %q left after the device read on", m)
	}
}
