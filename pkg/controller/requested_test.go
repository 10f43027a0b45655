package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/healthcheck"
	shared "github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/requests"
)

// The incident loop's side of the health checkers' requests (openRequested,
// standsOrWithdraw): the node's sync opens the incident a request asked for, drives it
// under the node's policy, ends the ask with it, cancels it when the request is withdrawn
// before fencing, and finishes a fence under way. How a request finds its node and
// mirrors its incident is tested in pkg/requests.

// requestConfig is fixtureConfig with the external remediation contract on.
func requestConfig() *v1alpha1.Config {
	cfg := fixtureConfig()
	cfg.ExternalRemediation.Enabled = true
	return cfg
}

// syncRequest runs one sync of the request with key at the fixture's clock.
func (f *fixture) syncRequest(key string) time.Duration {
	f.t.Helper()
	d, err := f.c.peers.requests.Sync(context.Background(), key)
	if err != nil {
		f.t.Fatalf("sync request %s: %v", key, err)
	}
	return d
}

// request reads a request back from the fake API server and caches it, as its watch
// would.
func (f *fixture) request(ns, name string) *v1alpha1.KubefenceRemediation {
	f.t.Helper()
	kr, err := f.dyn.FencingV1alpha1().KubefenceRemediations(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.dyn.ClearActions()
	f.cache(kr)
	return kr
}

// cacheIncidents puts node's incidents, as the fake API server has them, in the cache.
func (f *fixture) cacheIncidents(node string) {
	f.t.Helper()
	for _, nf := range f.incidents(node) {
		f.cache(nf)
	}
}

// TestFixtureRequestFences: NodeHealthCheck's request for a node opens one incident, in
// the node's own sync, named for the request and requested by its caller; the node is
// fenced and released under its policy, and the request shows Processing, then
// Succeeded. The node's own detection (its Lease is stale too) opens no second incident.
func TestFixtureRequestFences(t *testing.T) {
	kr := shared.NHCRequest("node-1")
	f := newFixture(t, requestConfig(), append(threeNodes(), kr)...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")

	if d := f.syncRequest("nhc/node-1"); d != 0 {
		t.Errorf("requeue %s before the incident opens, want 0 (the incident's events bring it back)", d)
	}
	f.expectRequests("update kubefenceremediations/status")
	got := f.request("nhc", "node-1")
	shared.ExpectConditions(t, got, metav1.ConditionTrue, metav1.ConditionUnknown, "Opening")
	if got.Status.NodeName != "node-1" {
		t.Errorf("status.nodeName %q, want node-1", got.Status.NodeName)
	}

	f.sync("node-1")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
	nf := f.incident("node-1")
	if want := healthcheck.NodeFenceName("node-1", kr.UID); nf.Name != want {
		t.Errorf("incident %s, want %s (named for the request)", nf.Name, want)
	}
	if !strings.HasPrefix(nf.Spec.RequestedBy, v1alpha1.RequestedByRemediationPrefix+"NodeHealthCheck workers") {
		t.Errorf("requestedBy %q, want the remediation prefix and the caller", nf.Spec.RequestedBy)
	}
	if nf.Status.Phase != v1alpha1.PhaseRemediated {
		t.Fatalf("phase %s, want Remediated (%s)", nf.Status.Phase, nf.Status.Message)
	}

	f.cacheIncidents("node-1")
	f.requests()
	if d := f.syncRequest("nhc/node-1"); d != requests.Recheck {
		t.Errorf("requeue %s while the incident is open, want %s", d, requests.Recheck)
	}
	got = f.request("nhc", "node-1")
	shared.ExpectConditions(t, got, metav1.ConditionFalse, metav1.ConditionTrue, string(v1alpha1.PhaseRemediated))
	if got.Status.NodeFence != nf.Name || got.Status.Phase != v1alpha1.PhaseRemediated {
		t.Errorf("status nodeFence=%q phase=%s, want %s Remediated", got.Status.NodeFence, got.Status.Phase, nf.Name)
	}
	// Nothing changed: nothing is written.
	f.syncRequest("nhc/node-1")
	f.expectRequests()
}

// TestFixtureRequestTimedOut: NodeHealthCheck's timeout stops kubefence. An incident held
// by the budget (nothing called yet) is cancelled, with no agent call, and the request
// says Succeeded=False; a fence already under way is finished and verified, never left
// half done.
func TestFixtureRequestTimedOut(t *testing.T) {
	for name, tc := range map[string]struct {
		attempt   v1alpha1.AttemptState
		phase     v1alpha1.Phase
		calls     []string
		succeeded metav1.ConditionStatus
	}{
		"held, nothing called": {phase: v1alpha1.PhaseCancelled, succeeded: metav1.ConditionFalse},
		// The call under way landed; it is read back, never sent again.
		"fence under way": {attempt: v1alpha1.AttemptFencing, phase: v1alpha1.PhaseRemediated, calls: []string{"Status bmc-node-1"}, succeeded: metav1.ConditionTrue},
	} {
		t.Run(name, func(t *testing.T) {
			kr := shared.NHCRequest("node-1")
			kr.Annotations[v1alpha1.RemediationTimedOutAnnotation] = f0.Add(30 * time.Second).Format(time.RFC3339)
			nf := fencedIncident(v1alpha1.PhaseHeld, tc.attempt)
			nf.Name = healthcheck.NodeFenceName("node-1", kr.UID)
			if tc.attempt != "" {
				nf.Status.Phase = v1alpha1.PhaseFencing
			}
			req := healthcheck.Request(kr, "node-1")
			nf.Labels, nf.Annotations, nf.Spec = req.Labels, req.Annotations, req.Spec
			kr.Status.NodeFence = nf.Name
			f := newFixture(t, requestConfig(), append(threeNodes(), nf, kr)...)
			f.bmc.On = tc.attempt == ""
			// Two nodes dead: a storm the budget holds.
			f.clock.Set(f0.Add(time.Minute))
			f.renewAllBut("node-1", "node-2")
			f.sync("node-1")
			f.expectCalls(tc.calls...)
			got := f.incident("node-1")
			if got.Status.Phase != tc.phase {
				t.Fatalf("phase %s, want %s (%s)", got.Status.Phase, tc.phase, got.Status.Message)
			}
			f.cacheIncidents("node-1")
			f.syncRequest("nhc/node-1")
			shared.ExpectConditions(t, f.request("nhc", "node-1"), metav1.ConditionFalse, tc.succeeded, "")
		})
	}
}

// TestFixtureRequestWithdrawnKeepsTheFence: a request deleted after its node was fenced
// undoes nothing: the incident stays Remediated while the node is down, and recovers,
// with the fence undone, only on the node's new boot.
func TestFixtureRequestWithdrawnKeepsTheFence(t *testing.T) {
	kr := shared.NHCRequest("node-1")
	nf := fencedIncident(v1alpha1.PhaseRemediated, v1alpha1.AttemptVerified)
	req := healthcheck.Request(kr, "node-1")
	nf.Name, nf.Labels, nf.Annotations, nf.Spec = req.Name, req.Labels, req.Annotations, req.Spec
	f := newFixture(t, requestConfig(), append(threeNodes(), nf)...) // the request is gone
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectCalls()
	f.expectRequests()
	if got := f.incident("node-1"); got.Status.Phase != v1alpha1.PhaseRemediated {
		t.Fatalf("phase %s after the request was deleted, want Remediated", got.Status.Phase)
	}
	// Back on a new boot: recovered, the fence undone.
	f.bootAgain("node-1")
	f.expectCalls("Unfence bmc-node-1")
	if got := f.incident("node-1"); got.Status.Phase != v1alpha1.PhaseRecovered {
		t.Errorf("phase %s on the new boot, want Recovered (%s)", got.Status.Phase, got.Status.Message)
	}
}

// TestFixtureMachineRequest: MachineHealthCheck's request names a Machine; its node is
// the Machine's status.nodeRef, and that node's sync opens the incident.
func TestFixtureMachineRequest(t *testing.T) {
	f := newFixture(t, requestConfig(), append(threeNodes(), shared.MHCRequest("m-2"), shared.Machine("m-2", "node-2"))...)
	f.syncRequest("capi/m-2")
	got := f.request("capi", "m-2")
	if got.Status.NodeName != "node-2" {
		t.Errorf("status.nodeName %q, want node-2 (the Machine's nodeRef)", got.Status.NodeName)
	}
	if w := f.c.peers.requests.Wanted("node-2"); w != "capi/m-2" {
		t.Errorf("node-2's sync asked for %q, want capi/m-2", w)
	}
	f.sync("node-2")
	nf := f.incident("node-2")
	if !strings.HasPrefix(nf.Spec.RequestedBy, v1alpha1.RequestedByRemediationPrefix+"MachineHealthCheck of Machine capi/m-2") {
		t.Errorf("requestedBy %q, want the MachineHealthCheck of capi/m-2", nf.Spec.RequestedBy)
	}
	f.expectCalls("Fence bmc-node-2", "Status bmc-node-2")
}

// TestFixtureRequestAskEndsWithTheIncident: a request asks its node's sync for an
// incident while the node's own detection incident is not in the cache yet; the sync
// then drives that incident, and the ask ends with it. Left standing, the ask opened an
// incident for the request once the node had recovered (the health checker deletes its
// request only after it sees the node healthy), and a request's incident is not cancelled
// by a sign of life: a healthy node fenced again.
func TestFixtureRequestAskEndsWithTheIncident(t *testing.T) {
	f := newFixture(t, requestConfig(), append(threeNodes(), shared.NHCRequest("node-1"))...)
	f.syncRequest("nhc/node-1")
	if w := f.c.peers.requests.Wanted("node-1"); w != "nhc/node-1" {
		t.Fatalf("node-1's sync asked for %q, want nhc/node-1", w)
	}
	own, err := f.dyn.FencingV1alpha1().NodeFences().Create(context.Background(), fencedIncident(v1alpha1.PhasePending, ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.cache(own)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
	if w := f.c.peers.requests.Wanted("node-1"); w != "" {
		t.Errorf("the ask for %s outlived the incident that answers it", w)
	}
	// The node is back on a new boot and the incident recovered; the request stands.
	done := f.incident("node-1")
	done.Status.Phase = v1alpha1.PhaseRecovered
	if _, err := f.dyn.FencingV1alpha1().NodeFences().UpdateStatus(context.Background(), done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.c.store.Forget(done.Name) // written here, not by the controller
	f.cacheIncidents("node-1")
	f.bootAgain("node-1")
	f.expectCalls()
	if n := len(f.incidents("node-1")); n != 1 {
		t.Errorf("%d incidents for node-1 after its recovery, want 1", n)
	}
}

// bootAgain brings node back a minute later on a new boot, Ready and renewing, and syncs
// it.
func (f *fixture) bootAgain(node string) {
	f.t.Helper()
	f.clock.Step(time.Minute)
	back := fixtureNode(node, "boot-2", true)
	back.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(f.clock.Now())
	f.cache(back)
	f.renewAllBut()
	f.sync(node)
}
