package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/policy"
)

// TestReplicaHoldsWhateverThePolicy: a held incident of a node relabelled out of every
// policy is decided under the policy it recorded, and a live controller replica on the
// node still holds its fence: that node is alive, whatever its labels say.
func TestReplicaHoldsWhateverThePolicy(t *testing.T) {
	cfg := fixtureConfig()
	cfg.Policies[0].NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}
	nf := fencedIncident(v1alpha1.PhaseHeld, "")
	nf.Status.Message = "held for a while"
	objs := threeNodes()
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok {
			n.Labels = map[string]string{"pool": "a"}
		}
	}
	f := newFixture(t, cfg, append(objs, nf)...)
	// node-1 is relabelled out of the policy; a replica runs on it, renewing.
	n := fixtureNode("node-1", "boot-node-1", false)
	f.cache(n)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.c.peers.replicas.Observe(identityLease("replica-b", "node-1", f.clock.Now()), f.clock.Now())
	f.sync("node-1")
	f.expectCalls()
	got := f.incident("node-1")
	if got.Status.Phase != v1alpha1.PhaseHeld || len(got.Status.Attempts) > 0 {
		t.Fatalf("phase %s with %d attempts, want Held with none", got.Status.Phase, len(got.Status.Attempts))
	}
	if holds := stepsOf(got, v1alpha1.StepHold); len(holds) == 0 || !strings.Contains(holds[len(holds)-1], policy.ReasonControllerHere) {
		t.Errorf("hold steps %q, want the last one for %s", holds, policy.ReasonControllerHere)
	}
}

// TestPersonsRequestOutlivedByARecovery: a person's NodeFence created while the node's
// incident was open is not driven, once that incident recovers the node, on evidence
// that predates the recovery: it is held, saying why, until the person forces it; the
// controller's own incident would be cancelled.
func TestPersonsRequestOutlivedByARecovery(t *testing.T) {
	f := backOnANewBoot(t, fixtureConfig())
	person := &v1alpha1.NodeFence{
		ObjectMeta: metav1.ObjectMeta{Name: "maint-1", ResourceVersion: "1", Labels: map[string]string{v1alpha1.NodeLabel: "node-1"},
			CreationTimestamp: metav1.NewTime(f0.Add(30 * time.Second))},
		Spec: v1alpha1.NodeFenceSpec{NodeName: "node-1", RequestedBy: "alice", Reason: "node-1 looks dead"},
	}
	if _, err := f.dyn.FencingV1alpha1().NodeFences().Create(context.Background(), person, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.cache(person)
	f.sync("node-1") // the older incident recovers the node
	f.expectCalls("Unfence bmc-node-1")
	f.catchUp("node-1")
	f.clock.Step(time.Second)
	f.sync("node-1")
	f.expectCalls()
	got := stored(t, f.c, "maint-1")
	if got.Status.Phase != v1alpha1.PhaseHeld || !strings.Contains(got.Status.Message, "node-1-x0 of node node-1 ended Recovered") {
		t.Fatalf("person's request %s (%q), want Held, outlived by node-1-x0's recovery", got.Status.Phase, got.Status.Message)
	}
	// The person confirms: the request is forced, and the node fenced.
	got.Annotations = map[string]string{v1alpha1.ForceAnnotation: "true"}
	f.cache(got)
	f.clock.Step(time.Second)
	f.sync("node-1")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
}

// TestUnwrittenIncidentReadLive: an incident whose creator stopped before its first
// status write has no recorded evidence; this replica fences it on its own view only
// after reading the node's Lease from the API server, and a renewal there cancels it.
func TestUnwrittenIncidentReadLive(t *testing.T) {
	nf := fencedIncident("", "")
	nf.Status = v1alpha1.NodeFenceStatus{}
	f := newFixture(t, fixtureConfig(), append(threeNodes(), nf)...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	// The cache missed node-1's latest renewals; the API server has them.
	l := fixtureLease("node-1", f.clock.Now().Add(-5*time.Second))
	if _, err := f.kube.CoordinationV1().Leases(NodeLeaseNamespace).Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.sync("node-1")
	f.expectCalls()
	if got := f.incident("node-1"); got.Status.Phase != v1alpha1.PhaseCancelled {
		t.Errorf("phase %s (%q), want Cancelled on the live renewal", got.Status.Phase, got.Status.Message)
	}
}

// TestMarkedNodeHeld: a node the device monitor marked (its fence device read off while
// it lived) is not fenced when it dies: its incident is held with the mark's words, and
// no agent is called: a fence through that device would verify without touching it.
func TestMarkedNodeHeld(t *testing.T) {
	objs := threeNodes()
	const mark = "agent ipmi read target bmc-spare off at 2026-11-24T06:00:00Z, and node node-1 renewed its Lease after"
	objs[0].(*corev1.Node).Annotations[v1alpha1.TargetReadsOffAnnotation] = mark
	f := newFixture(t, fixtureConfig(), objs...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectCalls()
	nf := f.incident("node-1")
	if nf.Status.Phase != v1alpha1.PhaseHeld || nf.Status.Message != mark {
		t.Fatalf("incident %s (%q), want Held with the mark's words", nf.Status.Phase, nf.Status.Message)
	}
	if holds := stepsOf(nf, v1alpha1.StepHold); len(holds) == 0 || !strings.HasPrefix(holds[0], policy.ReasonTargetReadsOff) {
		t.Errorf("hold steps %q, want %s", holds, policy.ReasonTargetReadsOff)
	}
}

// TestReplicaHoldLiftsWhenItsRenewalsLapse: a dead node on which a standby replica renewed
// its identity Lease is held until three renewal intervals (15s by default) have passed
// since this replica saw that renewal, and not a moment less; then it is fenced at once,
// not up to a hold's recheck (2s) later.
func TestReplicaHoldLiftsWhenItsRenewalsLapse(t *testing.T) {
	f := newFixture(t, fixtureConfig(), threeNodes()...)
	window := 3 * f.c.opts.Leader.IdentityRenewInterval
	seen := f0.Add(time.Minute - window + 700*time.Millisecond)
	f.clock.Set(seen)
	f.c.peers.replicas.Observe(identityLease("replica-b", "node-1", seen), f.clock.Now())
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	if after := f.sync("node-1"); after != 700*time.Millisecond {
		t.Errorf("held, looked at again after %s; want 700ms, when the replica's window ends", after)
	}
	f.expectCalls()
	if nf := f.incident("node-1"); nf.Status.Phase != v1alpha1.PhaseHeld || !strings.Contains(nf.Status.Message, "replica-b") {
		t.Fatalf("incident %s (%q), want Held by replica-b", nf.Status.Phase, nf.Status.Message)
	}
	f.clock.Set(seen.Add(window - time.Millisecond))
	if after := f.sync("node-1"); after != time.Millisecond {
		t.Errorf("a millisecond before the window ends: looked at again after %s, want 1ms", after)
	}
	f.expectCalls()
	f.clock.Set(seen.Add(window))
	f.sync("node-1")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
}
