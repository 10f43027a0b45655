package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/policy"
)

// pendingIncident is an incident opened at detected on a Lease last renewed at renewed
// (nil: none recorded), by the replica "old-leader".
func pendingIncident(detected time.Time, renewed *time.Time) *v1alpha1.NodeFence {
	nf := &v1alpha1.NodeFence{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "NodeFence"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1-x", ResourceVersion: "1"},
		Spec:       v1alpha1.NodeFenceSpec{NodeName: "node-1", RequestedBy: v1alpha1.RequestedByController},
		Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhasePending, Leader: "old-leader", BootID: "boot-1",
			Timeline: []v1alpha1.Step{{Time: metav1.NewMicroTime(detected), Type: v1alpha1.StepDetected}}},
	}
	if renewed != nil {
		rt := metav1.NewMicroTime(*renewed)
		nf.Status.LeaseRenewTime = &rt
	}
	return nf
}

// TestSignOfLife: an open incident's evidence stands until the kubelet itself says
// otherwise (a new leader cancelled a dead node's incident because its own
// restarted clocks made the node look healthy, then opened a second one).
func TestSignOfLife(t *testing.T) {
	detected := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	renewed := detected.Add(-31 * time.Second).Add(-7 * time.Hour) // the kubelet's clock is skewed
	for name, tc := range map[string]struct {
		recorded *time.Time
		obs      detector.Observation
		life     bool
	}{
		"new leader, restarted clocks, same renewTime: stands": {&renewed,
			detector.Observation{Health: detector.Healthy, Kubelet: detector.KubeletSeen{RenewTime: renewed}}, false},
		"new leader, renewal seen before the detection: stands": {&renewed,
			detector.Observation{Health: detector.Suspect, Kubelet: detector.KubeletSeen{RenewTime: renewed, RenewalSeen: detected.Add(-40 * time.Second)}}, false},
		"renewTime later than recorded: alive": {&renewed,
			detector.Observation{Health: detector.Suspect, Kubelet: detector.KubeletSeen{RenewTime: renewed.Add(10 * time.Second)}}, true},
		"renewed, even if unhealthy again: alive": {&renewed,
			detector.Observation{Health: detector.Unhealthy, Kubelet: detector.KubeletSeen{RenewTime: renewed.Add(time.Second)}}, true},
		"nothing recorded, renewal seen after the detection: alive": {nil,
			detector.Observation{Health: detector.Healthy, Kubelet: detector.KubeletSeen{RenewTime: renewed, RenewalSeen: detected.Add(time.Second)}}, true},
		"nothing recorded, healthy on restarted clocks only: stands": {nil,
			detector.Observation{Health: detector.Healthy, Kubelet: detector.KubeletSeen{RenewTime: renewed}}, false},
		"no Lease at all, Ready again: alive": {nil, detector.Observation{Health: detector.Healthy}, true},
	} {
		t.Run(name, func(t *testing.T) {
			got := fencer.SignOfLife(pendingIncident(detected, tc.recorded), tc.obs)
			if (got != "") != tc.life {
				t.Errorf("signOfLife = %q, want a sign of life: %v", got, tc.life)
			}
		})
	}
}

// TestAdoptedIncidentIsNotCancelledOnFreshClocks drives decide as a new leader does right
// after a takeover: the dead node's Lease has not changed, so the incident goes on to
// fence (here it fails at once: no agent is configured) instead of being cancelled; with
// a later renewTime on the API server it is cancelled, naming the renewal.
func TestAdoptedIncidentIsNotCancelledOnFreshClocks(t *testing.T) {
	detected := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	renewed := detected.Add(-31 * time.Second)
	for name, tc := range map[string]struct {
		live  time.Time
		phase v1alpha1.Phase
	}{
		"Lease unchanged since the detection: fenced": {renewed, v1alpha1.PhaseFencing},
		"Lease renewed on the API server: cancelled":  {renewed.Add(10 * time.Second), v1alpha1.PhaseCancelled},
	} {
		t.Run(name, func(t *testing.T) {
			nf := pendingIncident(detected, &renewed)
			nf.Status.Policy = "default"
			rt := metav1.NewMicroTime(tc.live)
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Namespace: NodeLeaseNamespace},
				Spec: coordinationv1.LeaseSpec{RenewTime: &rt}}
			c := testController(t, nf, lease)
			c.cfg.Policies = []v1alpha1.Policy{{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{"none"}}}}}
			c.cfg.Policies[0].Default()
			c.now = func() time.Time { return detected.Add(5 * time.Second) }
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
			obs := detector.Observation{Node: "node-1", Health: detector.Healthy, Kubelet: detector.KubeletSeen{RenewTime: renewed}}
			_, _ = c.drive(context.Background(), nf, node, policy.Node{}, obs)
			got := stored(t, c, nf.Name)
			if got.Status.Phase == v1alpha1.PhaseCancelled && tc.phase != v1alpha1.PhaseCancelled {
				t.Fatalf("cancelled on restarted clocks: %s", got.Status.Message)
			}
			if tc.phase == v1alpha1.PhaseCancelled && got.Status.Phase != v1alpha1.PhaseCancelled {
				t.Fatalf("phase %s, want Cancelled on a renewal", got.Status.Phase)
			}
			if tc.phase == v1alpha1.PhaseFencing && fencer.StepTime(got, v1alpha1.StepFenceStarted).IsZero() {
				t.Errorf("fence never started: phase %s, timeline %+v", got.Status.Phase, got.Status.Timeline)
			}
		})
	}
}

// TestUnhealthyGaugeFollowsIncidents: kubefence_nodes_unhealthy counts a node with an open
// incident, and stops counting it once the incident is cancelled (the gauge
// stayed at 2 after both incidents it counted were cancelled).
func TestUnhealthyGaugeFollowsIncidents(t *testing.T) {
	detected := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	nf := pendingIncident(detected, nil)
	c := testController(t, nf)
	c.cfg.Policies = []v1alpha1.Policy{{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{"none"}}}}}
	c.cfg.Policies[0].Default()
	for _, n := range []string{"node-1", "node-2"} {
		if err := c.opts.Caches.Kube.Core().V1().Nodes().Informer().GetIndexer().Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nfIndexer(c).Add(nf.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	c.refreshUnhealthy(detected)
	if got := testutil.ToFloat64(c.metrics.Unhealthy); got != 1 {
		t.Fatalf("gauge %v with one open incident, want 1", got)
	}
	nf.Status.Phase = v1alpha1.PhaseCancelled
	if err := nfIndexer(c).Update(nf.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	c.refreshUnhealthy(detected)
	if got := testutil.ToFloat64(c.metrics.Unhealthy); got != 0 {
		t.Errorf("gauge %v after the incident was cancelled, want 0", got)
	}
}

// TestFailedIncidentBlocksNewOnes: after an incident ends Failed, no automatic incident
// opens for its node until the node shows a sign of life or a new boot, or a person
// asks for a retry (a new incident opened 2 s after a Failed one, held back
// only by a cooldown that claimed the node "was fenced").
func TestFailedIncidentBlocksNewOnes(t *testing.T) {
	detected := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	renewed := detected.Add(-31 * time.Second)
	for name, tc := range map[string]struct {
		phase   v1alpha1.Phase
		retry   bool
		obs     detector.Observation
		blocked bool
	}{
		"failed, nothing since":       {v1alpha1.PhaseFailed, false, detector.Observation{BootID: "boot-1", Kubelet: detector.KubeletSeen{RenewTime: renewed}}, true},
		"failed, a person asks again": {v1alpha1.PhaseFailed, true, detector.Observation{BootID: "boot-1", Kubelet: detector.KubeletSeen{RenewTime: renewed}}, false},
		"failed, the node renewed":    {v1alpha1.PhaseFailed, false, detector.Observation{BootID: "boot-1", Kubelet: detector.KubeletSeen{RenewTime: renewed.Add(time.Second)}}, false},
		"failed, the node rebooted":   {v1alpha1.PhaseFailed, false, detector.Observation{BootID: "boot-2", Kubelet: detector.KubeletSeen{RenewTime: renewed}}, false},
		"recovered: nothing to block": {v1alpha1.PhaseRecovered, false, detector.Observation{BootID: "boot-1", Kubelet: detector.KubeletSeen{RenewTime: renewed}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			nf := pendingIncident(detected, &renewed)
			nf.Status.Phase, nf.Status.Message = tc.phase, "level 1: authentication failed"
			if tc.retry {
				nf.Annotations = map[string]string{v1alpha1.RetryAnnotation: "true"}
			}
			c := testController(t, nf)
			if err := nfIndexer(c).Add(nf.DeepCopy()); err != nil {
				t.Fatal(err)
			}
			why := c.failedUnrecovered("node-1", tc.obs)
			if (why != "") != tc.blocked {
				t.Errorf("failedUnrecovered = %q, want blocked %v", why, tc.blocked)
			}
		})
	}
}

// TestIncidentWithoutEvidenceWaitsForOwn: an incident whose creator stopped before it
// wrote the detection carries no evidence to adopt; the new leader neither cancels it
// nor fences on it until its own detector finds the node unhealthy.
func TestIncidentWithoutEvidenceWaitsForOwn(t *testing.T) {
	now := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		health detector.Health
		fenced bool
	}{
		"healthy on fresh clocks: waits": {detector.Healthy, false},
		"own detector says unhealthy":    {detector.Unhealthy, true},
	} {
		t.Run(name, func(t *testing.T) {
			nf := pendingIncident(now, nil)
			nf.Status = v1alpha1.NodeFenceStatus{}
			c := testController(t, nf)
			c.cfg.Policies = []v1alpha1.Policy{{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{"none"}}}}}
			c.cfg.Policies[0].Default()
			c.now = func() time.Time { return now }
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
			_, _ = c.drive(context.Background(), nf, node, policy.Node{}, detector.Observation{Node: "node-1", Health: tc.health})
			got := stored(t, c, nf.Name)
			if got.Status.Phase == v1alpha1.PhaseCancelled {
				t.Fatalf("cancelled: %s", got.Status.Message)
			}
			if started := !fencer.StepTime(got, v1alpha1.StepFenceStarted).IsZero(); started != tc.fenced {
				t.Errorf("fence started %v, want %v (phase %s)", started, tc.fenced, got.Status.Phase)
			}
		})
	}
}

// TestAPIOutageRestartsClocks: a replica that could not read a node Lease (the API
// server was down, and with it every kubelet's renewals) does not open an incident on
// the staleness the outage caused: the first read that works again restarts the Lease
// clocks, as a takeover does.
func TestAPIOutageRestartsClocks(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	rt := metav1.NewMicroTime(t0)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Namespace: NodeLeaseNamespace},
		Spec: coordinationv1.LeaseSpec{RenewTime: &rt}}
	c := testController(t, pendingIncident(t0, nil), lease)
	pol := &v1alpha1.Policy{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{"none"}}}}
	pol.Default()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	c.detector.ObserveLease(lease, t0)
	now := t0.Add(time.Hour)
	if obs := c.detector.Assess(node, now); obs.Health != detector.Unhealthy {
		t.Fatalf("setup: %s", obs.Health)
	}
	fail := true
	c.client.(*fake.Clientset).PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	c.now = func() time.Time { return now }
	if _, err := c.confirmStale(context.Background(), node, pol); err == nil {
		t.Fatalf("confirmStale during the outage did not fail")
	}
	fail = false
	fresh, err := c.confirmStale(context.Background(), node, pol)
	if err != nil || fresh {
		t.Fatalf("first read after the outage: stale %v, %v; want no incident", fresh, err)
	}
	if obs := c.detector.Assess(node, now.Add(time.Second)); obs.Health == detector.Unhealthy {
		t.Errorf("still unhealthy right after the outage: %s", obs.Evidence)
	}
	now = now.Add(time.Hour)
	if fresh, err := c.confirmStale(context.Background(), node, pol); err != nil || !fresh {
		t.Errorf("a floor after the outage with no renewal: stale %v, %v; want stale", fresh, err)
	}
}
