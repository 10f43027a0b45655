package requests

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/healthcheck"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/leader"
)

// TestRequestAsksTheNodeSync: NodeHealthCheck's request for a node with no incident asks
// the node's sync to open one (incidents of a node are opened by its sync alone) and
// shows Processing; once the incident the sync opened is Remediated, the request shows
// Succeeded and names it, is looked at again while the incident stays open, and a sync
// that finds nothing changed writes nothing.
func TestRequestAsksTheNodeSync(t *testing.T) {
	kr := fixture.NHCRequest("node-1")
	h := newHarness(t, harnessOptions{}, kr)
	if d := h.sync("nhc/node-1"); d != 0 {
		t.Errorf("requeue %s before the incident opens, want 0 (the incident's events bring it back)", d)
	}
	h.expectRequests("update kubefenceremediations/status")
	h.expectEnqueued("node-1")
	if w := h.r.Wanted("node-1"); w != "nhc/node-1" {
		t.Errorf("node-1's sync asked for %q, want nhc/node-1", w)
	}
	got := h.request("nhc", "node-1")
	fixture.ExpectConditions(t, got, metav1.ConditionTrue, metav1.ConditionUnknown, "Opening")
	if got.Status.NodeName != "node-1" {
		t.Errorf("status.nodeName %q, want node-1", got.Status.NodeName)
	}

	// The node's sync opens the incident for the request and fences the node.
	nf := healthcheck.Request(kr, "node-1")
	nf.Status.Phase = v1alpha1.PhaseRemediated
	h.inc.add(nf)
	h.r.Answered("node-1", "nhc/node-1")
	if d := h.sync("nhc/node-1"); d != Recheck {
		t.Errorf("requeue %s while the incident is open, want %s", d, Recheck)
	}
	got = h.request("nhc", "node-1")
	fixture.ExpectConditions(t, got, metav1.ConditionFalse, metav1.ConditionTrue, string(v1alpha1.PhaseRemediated))
	if got.Status.NodeFence != nf.Name || got.Status.Phase != v1alpha1.PhaseRemediated {
		t.Errorf("status nodeFence=%q phase=%s, want %s Remediated", got.Status.NodeFence, got.Status.Phase, nf.Name)
	}
	if w := h.r.Wanted("node-1"); w != "" {
		t.Errorf("node-1's sync still asked for %q once the incident answered it", w)
	}
	// Nothing changed: nothing is written.
	h.sync("nhc/node-1")
	h.expectRequests()
}

// TestRequestJoinsOpenIncident: a request for a node whose own incident is open is
// carried by that incident; the node's sync is not asked to open a second one.
func TestRequestJoinsOpenIncident(t *testing.T) {
	h := newHarness(t, harnessOptions{}, fixture.NHCRequest("node-1"))
	open := incident("node-1-x0", v1alpha1.PhaseFencing)
	h.inc.add(open)
	h.sync("nhc/node-1")
	h.expectRequests("update kubefenceremediations/status")
	got := h.request("nhc", "node-1")
	if got.Status.NodeFence != open.Name || got.Status.Phase != v1alpha1.PhaseFencing {
		t.Errorf("status nodeFence=%q phase=%s, want %s Fencing", got.Status.NodeFence, got.Status.Phase, open.Name)
	}
	fixture.ExpectConditions(t, got, metav1.ConditionTrue, metav1.ConditionUnknown, "")
	if w := h.r.Wanted("node-1"); w != "" {
		t.Errorf("node-1's sync asked to open an incident for %s, want none", w)
	}
	h.expectEnqueued()
}

// TestRequestProblems: a request that names no node kubefence can fence says why, with
// Succeeded=False so that the health checker escalates at once, and opens nothing.
func TestRequestProblems(t *testing.T) {
	for name, tc := range map[string]struct {
		o      harnessOptions
		req    *v1alpha1.KubefenceRemediation
		reason string
	}{
		"no such node":                  {req: fixture.NHCRequest("node-9"), reason: "NodeNotFound"},
		"no policy governs the node":    {o: harnessOptions{selector: map[string]string{"fencing": "on"}}, req: fixture.NHCRequest("node-1"), reason: "NoPolicy"},
		"no such Machine":               {req: fixture.MHCRequest("m-1"), reason: "MachineNotFound"},
		"the Machine has no node (yet)": {o: harnessOptions{machines: []runtime.Object{fixture.Machine("m-1", "")}}, req: fixture.MHCRequest("m-1"), reason: "MachineHasNoNode"},
		"no client of Machines":         {o: harnessOptions{noMachines: true}, req: fixture.MHCRequest("m-1"), reason: "NoMachineClient"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, tc.o, tc.req)
			h.sync(tc.req.Namespace + "/" + tc.req.Name)
			h.expectRequests("update kubefenceremediations/status")
			fixture.ExpectConditions(t, h.request(tc.req.Namespace, tc.req.Name), metav1.ConditionFalse, metav1.ConditionFalse, tc.reason)
			for _, n := range []string{"node-1", "node-9"} {
				if w := h.r.Wanted(n); w != "" {
					t.Errorf("%s's sync asked to open an incident for %s", n, w)
				}
			}
			h.expectEnqueued()
		})
	}
}

// TestMachineRequest: MachineHealthCheck's request names a Machine; its node is the
// Machine's status.nodeRef, and that node's sync is asked to open the incident.
func TestMachineRequest(t *testing.T) {
	h := newHarness(t, harnessOptions{machines: []runtime.Object{fixture.Machine("m-2", "node-2")}}, fixture.MHCRequest("m-2"))
	h.sync("capi/m-2")
	got := h.request("capi", "m-2")
	if got.Status.NodeName != "node-2" {
		t.Errorf("status.nodeName %q, want node-2 (the Machine's nodeRef)", got.Status.NodeName)
	}
	if w := h.r.Wanted("node-2"); w != "capi/m-2" {
		t.Errorf("node-2's sync asked for %q, want capi/m-2", w)
	}
	h.expectEnqueued("node-2")
}

// TestTimedOutRequestOpensNothing: a request whose health checker timed out before any
// incident carried it asks for none.
func TestTimedOutRequestOpensNothing(t *testing.T) {
	kr := fixture.NHCRequest("node-1")
	kr.Annotations[v1alpha1.RemediationTimedOutAnnotation] = fixture.T0.Format(time.RFC3339)
	h := newHarness(t, harnessOptions{}, kr)
	if d := h.sync("nhc/node-1"); d != 0 {
		t.Errorf("requeue %s, want 0", d)
	}
	if w := h.r.Wanted("node-1"); w != "" {
		t.Errorf("node-1's sync asked to open an incident for %s after the timeout", w)
	}
	h.expectEnqueued()
	if got := h.request("nhc", "node-1"); got.Status.NodeFence != "" {
		t.Errorf("status names incident %q, want none", got.Status.NodeFence)
	}
}

// TestRequestStatusNeedsTheLease (invariant 2): a replica that no longer leads writes no
// request's status; the sync fails, so the request is tried again.
func TestRequestStatusNeedsTheLease(t *testing.T) {
	h := newHarness(t, harnessOptions{}, fixture.NHCRequest("node-1"))
	h.deposed = leader.ErrStaleEpoch
	if _, err := h.r.Sync(context.Background(), "nhc/node-1"); !errors.Is(err, leader.ErrStaleEpoch) {
		t.Errorf("sync = %v, want leader.ErrStaleEpoch", err)
	}
	h.expectRequests()
}

// TestDeletedRequestSyncsToNothing: a request gone from the cache (or being deleted) is
// neither written nor asked for; its incident, if any, is the node's sync's to withdraw.
func TestDeletedRequestSyncsToNothing(t *testing.T) {
	deleting := fixture.NHCRequest("node-2")
	now := metav1.NewTime(fixture.T0)
	deleting.DeletionTimestamp = &now
	h := newHarness(t, harnessOptions{}, deleting)
	for _, key := range []string{"nhc/node-1", "nhc/node-2"} {
		if d := h.sync(key); d != 0 {
			t.Errorf("%s: requeue %s, want 0", key, d)
		}
	}
	h.expectRequests()
	h.expectEnqueued()
	if _, err := h.r.Sync(context.Background(), "a/b/c"); err == nil {
		t.Error("a key of three parts synced")
	}
}

// TestCarrier: the incident a request's status names carries it while it stands; one of
// the node's own detection that a sign of life cancelled does not, one opened for the
// request and cancelled (it was withdrawn) does.
func TestCarrier(t *testing.T) {
	kr := fixture.NHCRequest("node-1")
	own := incident("node-1-x0", v1alpha1.PhaseCancelled)
	forIt := healthcheck.Request(kr, "node-1")
	forIt.Status.Phase = v1alpha1.PhaseCancelled
	h := newHarness(t, harnessOptions{})
	h.inc.add(own)
	h.inc.add(forIt)
	for name, tc := range map[string]struct {
		names string
		want  *v1alpha1.NodeFence
	}{
		"none named":                        {"", nil},
		"named, gone":                       {"node-1-gone", nil},
		"the node's own, cancelled":         {own.Name, nil},
		"opened for the request, cancelled": {forIt.Name, forIt},
	} {
		k := kr.DeepCopy()
		k.Status.NodeFence = tc.names
		if got := h.r.Carrier(k); got != tc.want {
			t.Errorf("%s: carrier %v, want %v", name, got, tc.want)
		}
	}
}

// TestWithdrawn: an incident opened for a request asks whether the request still stands,
// from the cache or, before an agent is called, from the API server; an incident opened
// for no request is never withdrawn.
func TestWithdrawn(t *testing.T) {
	kr := fixture.NHCRequest("node-1")
	nf := healthcheck.Request(kr, "node-1")
	for name, tc := range map[string]struct {
		stored   bool
		live     bool
		nf       *v1alpha1.NodeFence
		want     string
		requests []string
	}{
		"stands":               {stored: true, nf: nf},
		"stands, read live":    {stored: true, live: true, nf: nf, requests: []string{"get kubefenceremediations node-1"}},
		"deleted":              {nf: nf, want: "its KubefenceRemediation was deleted (nhc/node-1)"},
		"deleted, read live":   {live: true, nf: nf, want: "its KubefenceRemediation was deleted (nhc/node-1)", requests: []string{"get kubefenceremediations node-1"}},
		"the controller's own": {nf: incident("node-1-x0", v1alpha1.PhasePending), live: true},
	} {
		t.Run(name, func(t *testing.T) {
			var krs []*v1alpha1.KubefenceRemediation
			if tc.stored {
				krs = append(krs, kr)
			}
			h := newHarness(t, harnessOptions{}, krs...)
			got, err := h.r.Withdrawn(context.Background(), tc.nf, tc.live)
			if err != nil || got != tc.want {
				t.Errorf("withdrawn %q, %v; want %q", got, err, tc.want)
			}
			h.expectRequests(tc.requests...)
		})
	}
	var none *Requests
	if got, err := none.Withdrawn(context.Background(), nf, true); got != "" || err != nil {
		t.Errorf("without the requests: withdrawn %q, %v; want nothing", got, err)
	}
}

// TestWants: the node's sync's ask for an incident stands until the request is answered
// (then the request is looked at again) or dropped; a later request's ask is not dropped
// by the end of an earlier one's.
func TestWants(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.r.want("node-1", "nhc/node-1")
	h.r.Done("node-1", "other/node-1")
	if w := h.r.Wanted("node-1"); w != "nhc/node-1" {
		t.Errorf("another request's end dropped the ask: %q", w)
	}
	h.r.Answered("node-1", "nhc/node-1")
	if w := h.r.Wanted("node-1"); w != "" {
		t.Errorf("ask %q left once answered", w)
	}
	if q := h.queued(); !slices.Equal(q, []string{"nhc/node-1"}) {
		t.Errorf("queued %v, want the answered request", q)
	}
	var none *Requests
	if w := none.Wanted("node-1"); w != "" {
		t.Errorf("without the requests: wanted %q", w)
	}
}

// TestOnIncident: a change of an incident queues the requests it carries: the one it was
// opened for, and those whose status names it.
func TestOnIncident(t *testing.T) {
	joined := fixture.NHCRequest("node-1")
	joined.Namespace = "other"
	joined.Status.NodeFence = "node-1-x0"
	h := newHarness(t, harnessOptions{}, joined)
	h.queued() // what the handlers queued as the cache was filled
	opened := healthcheck.Request(fixture.NHCRequest("node-2"), "node-2")
	h.r.OnIncident(opened)
	h.r.OnIncident(incident("node-1-x0", v1alpha1.PhaseFencing))
	if q, want := h.queued(), []string{"nhc/node-2", "other/node-1"}; !slices.Equal(q, want) {
		t.Errorf("queued %v, want %v", q, want)
	}
	var none *Requests
	none.OnIncident(opened) // without the requests: nothing to queue, no panic
}

// TestRequestEventsQueue: a request added, changed or deleted, as the watch brings it,
// is queued, and the node its status names is synced.
func TestRequestEventsQueue(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.factory.Start(ctx.Done())
	h.factory.WaitForCacheSync(ctx.Done())
	kr := fixture.NHCRequest("node-1")
	kr.Status.NodeName = "node-1"
	reqs := h.fencing.FencingV1alpha1().KubefenceRemediations("nhc")
	for _, change := range []func() error{
		func() error { _, err := reqs.Create(ctx, kr, metav1.CreateOptions{}); return err },
		func() error { return reqs.Delete(ctx, kr.Name, metav1.DeleteOptions{}) },
	} {
		fixture.Must(t, change())
		fixture.PollUntil(t, "the request queued", func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.r.queue.Len() > 0 && len(h.enqueued) > 0
		})
		if q := h.queued(); !slices.Equal(q, []string{"nhc/node-1"}) {
			t.Errorf("queued %v, want nhc/node-1", q)
		}
		h.expectEnqueued("node-1")
	}
	if !h.r.Synced() {
		t.Error("the requests' cache has not synced")
	}
}

// TestLookup: a request is read from the cache; one that is not there is nil, no error.
func TestLookup(t *testing.T) {
	h := newHarness(t, harnessOptions{}, fixture.NHCRequest("node-1"))
	if kr, err := h.r.Lookup("nhc/node-1"); err != nil || kr == nil || kr.Name != "node-1" {
		t.Errorf("lookup of a cached request: %v, %v", kr, err)
	}
	if kr, err := h.r.Lookup("nhc/node-9"); err != nil || kr != nil {
		t.Errorf("lookup of a missing request: %v, %v; want nil, nil", kr, err)
	}
	if _, err := h.r.Lookup("a/b/c"); err == nil || !strings.Contains(err.Error(), "a/b/c") {
		t.Errorf("lookup of a bad key: %v, want an error naming it", err)
	}
}

// TestToOpen: the node's sync opens an incident for the request it was asked to while the
// request stands and nothing carries it; a want whose request is gone or withdrawn ends,
// and one whose request an incident carries is answered (the request is looked at again).
// Joined answers a want with the node's open incident.
func TestToOpen(t *testing.T) {
	kr := fixture.NHCRequest("node-1")
	carrier := healthcheck.Request(kr, "node-1")
	for name, tc := range map[string]struct {
		want      bool
		kr        func() *v1alpha1.KubefenceRemediation // nil: none stored
		wantOpen  bool
		wantLeft  string // the want after
		wantQueue []string
	}{
		"no want": {kr: kr.DeepCopy},
		"gone":    {want: true},
		"withdrawn": {want: true, kr: func() *v1alpha1.KubefenceRemediation {
			k := kr.DeepCopy()
			k.Annotations = map[string]string{v1alpha1.RemediationTimedOutAnnotation: "2026-11-29T06:00:00Z"}
			return k
		}},
		"carried": {want: true, kr: func() *v1alpha1.KubefenceRemediation {
			k := kr.DeepCopy()
			k.Status.NodeFence = carrier.Name
			return k
		}, wantQueue: []string{"nhc/node-1"}},
		"stands": {want: true, kr: kr.DeepCopy, wantOpen: true, wantLeft: "nhc/node-1"},
	} {
		t.Run(name, func(t *testing.T) {
			var krs []*v1alpha1.KubefenceRemediation
			if tc.kr != nil {
				krs = append(krs, tc.kr())
			}
			h := newHarness(t, harnessOptions{}, krs...)
			h.inc.add(carrier)
			if tc.want {
				h.r.want("node-1", "nhc/node-1")
			}
			got, key, err := h.r.ToOpen("node-1")
			if err != nil || (got != nil) != tc.wantOpen || (tc.wantOpen && key != "nhc/node-1") {
				t.Errorf("ToOpen = %v, %q, %v; want a request to open %v", got, key, err, tc.wantOpen)
			}
			if w := h.r.Wanted("node-1"); w != tc.wantLeft {
				t.Errorf("want %q after, want %q", w, tc.wantLeft)
			}
			if q := h.queued(); !slices.Equal(q, tc.wantQueue) {
				t.Errorf("queued %v, want %v", q, tc.wantQueue)
			}
		})
	}
	h := newHarness(t, harnessOptions{})
	h.r.want("node-1", "nhc/node-1")
	h.r.Joined("node-1")
	if w := h.r.Wanted("node-1"); w != "" || !slices.Equal(h.queued(), []string{"nhc/node-1"}) {
		t.Errorf("joined: want %q left, queued %v", w, h.queued())
	}
	var none *Requests
	none.Joined("node-1")
}
