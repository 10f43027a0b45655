package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/oncall"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// failedWithWord is node-1's incident, Failed (its BMC never answered), with a person's
// confirm-off on it.
func failedWithWord() *v1alpha1.NodeFence {
	nf := fencedIncident(v1alpha1.PhaseFailed, v1alpha1.AttemptFailed)
	nf.Annotations = map[string]string{v1alpha1.ConfirmOffAnnotation: "chassis lost power", v1alpha1.ConfirmOffByAnnotation: "alice"}
	return nf
}

// TestFixtureConfirmOffReleasesFailed: a confirm-off on a Failed incident of a node whose
// Lease, read live, shows no renewal since the incident opened releases the node with
// no agent call, on the person's word.
func TestFixtureConfirmOffReleasesFailed(t *testing.T) {
	f := newFixture(t, fixtureConfig(), append(threeNodes(), failedWithWord())...)
	f.authorize("alice")
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectCalls()
	got := f.incident("node-1")
	st := got.Status
	if st.Phase != v1alpha1.PhaseRemediated || st.ConfirmedOff == nil || st.ConfirmedOff.By != "alice" || len(st.Remediation.TaintsAdded) == 0 {
		t.Fatalf("phase %s, confirmedOff %+v, taints %v: want released on alice's word", st.Phase, st.ConfirmedOff, st.Remediation.TaintsAdded)
	}
	if reqs := f.requests(); !slices.Contains(reqs, "get leases node-1") {
		t.Errorf("requests %v: want the node's Lease read live before the release", reqs)
	}
	f.expectEvents(v1alpha1.StepConfirmedOff, v1alpha1.ReasonRemediated)
}

// TestFixtureConfirmOffRefusedForLiveNode: the node's Lease, read live, was renewed after
// the incident opened: the node is alive, the word is refused and nothing released.
func TestFixtureConfirmOffRefusedForLiveNode(t *testing.T) {
	f := newFixture(t, fixtureConfig(), append(threeNodes(), failedWithWord())...)
	f.authorize("alice")
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	// The cache has not seen it yet; the API server has.
	if _, err := f.kube.CoordinationV1().Leases(NodeLeaseNamespace).Update(context.Background(), fixtureLease("node-1", f0.Add(30*time.Second)), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.kube.ClearActions()
	f.sync("node-1")
	f.expectCalls()
	got := f.incident("node-1")
	if got.Status.Verified() || got.Status.Phase != v1alpha1.PhaseFailed || len(stepsOf(got, v1alpha1.StepWordRefused)) != 1 ||
		!strings.Contains(stepsOf(got, v1alpha1.StepWordRefused)[0], "is alive") {
		t.Fatalf("phase %s, confirmedOff %+v, timeline %+v: want the word refused", got.Status.Phase, got.Status.ConfirmedOff, got.Status.Timeline)
	}
	for _, r := range f.requests() {
		if strings.HasPrefix(r, "update nodes") || strings.HasPrefix(r, "patch nodes") || strings.HasPrefix(r, "delete") {
			t.Errorf("released a live node: %s", r)
		}
	}
	// Answered once: the next sync sends nothing about it.
	f.cache(got)
	f.dyn.ClearActions()
	f.sync("node-1")
	if got := f.incident("node-1"); len(stepsOf(got, v1alpha1.StepWordRefused)) != 1 {
		t.Errorf("the word was answered again: %v", stepsOf(got, v1alpha1.StepWordRefused))
	}
}

// pausedBy is a pause with the given requests, as the informer of the pause ConfigMaps
// would give it.
func pausedBy(t *testing.T, data map[string]string) *oncall.Pauses {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-pause", Namespace: "kubefence",
		Labels: map[string]string{v1alpha1.PauseLabel: "true"}}, Data: data}
	factory := informers.NewSharedInformerFactory(fake.NewClientset(cm), 0)
	p, err := oncall.NewPauses(factory.Core().V1().ConfigMaps().Informer(), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory.Start(ctx.Done())
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return p.Why() != "", nil
	}); err != nil {
		t.Fatal("the pause request never showed")
	}
	return p
}

// TestFixturePauseHoldsTheNextFenceCall: a pause set while an incident is fencing holds
// the retry that is due (FencePaused), and sends it once the pause is lifted.
func TestFixturePauseHoldsTheNextFenceCall(t *testing.T) {
	cfg := fixtureConfig()
	one := int32(1)
	cfg.Policies[0].Levels[0].Retries = &one
	cfg.Policies[0].Levels[0].Backoff = metav1.Duration{Duration: time.Second}
	f := newFixture(t, cfg, threeNodes()...)
	busy := true
	f.bmc.FenceFunc = func(context.Context) error {
		if busy {
			return plugin.Errorf(plugin.KindRetryable, "BMC busy")
		}
		return nil
	}
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectCalls("Fence bmc-node-1")
	f.cache(f.incident("node-1"))

	f.c.peers.pauses = pausedBy(t, map[string]string{"patch-night": "alice"})
	busy = false
	f.clock.Step(2 * time.Second)
	f.sync("node-1")
	f.expectCalls()
	got := f.incident("node-1")
	if got.Status.Phase != v1alpha1.PhaseFencing || len(stepsOf(got, v1alpha1.StepFencePaused)) != 1 {
		t.Fatalf("phase %s, timeline %+v: want the retry held by the pause", got.Status.Phase, got.Status.Timeline)
	}
	f.cache(got)

	f.c.peers.pauses = nil
	f.sync("node-1")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
	if got := f.incident("node-1"); got.Status.Phase != v1alpha1.PhaseRemediated {
		t.Errorf("phase %s after the pause was lifted, want Remediated", got.Status.Phase)
	}
}

// TestFixtureCancel: a person's cancel ends a held incident, is refused on one that sent
// a fence, and closes the incident of a node whose Node object the API server no longer
// has (the cache may still show it) as decommissioned.
func TestFixtureCancel(t *testing.T) {
	word := map[string]string{v1alpha1.CancelAnnotation: "not this one", v1alpha1.CancelByAnnotation: "bob"}
	for name, tc := range map[string]struct {
		phase   v1alpha1.Phase
		attempt v1alpha1.AttemptState
		delete  bool
		want    v1alpha1.Phase
		step    string
	}{
		"held": {v1alpha1.PhaseHeld, "", false, v1alpha1.PhaseCancelled, v1alpha1.StepCancelledByPerson},
		// A pause held its first call: Fencing, and nothing sent.
		"fencing, nothing sent": {v1alpha1.PhaseFencing, "", false, v1alpha1.PhaseCancelled, v1alpha1.StepCancelledByPerson},
		"fence sent":            {v1alpha1.PhaseRemediated, v1alpha1.AttemptVerified, false, v1alpha1.PhaseRemediated, v1alpha1.StepWordRefused},
		"node gone, held":       {v1alpha1.PhaseHeld, "", true, v1alpha1.PhaseRecovered, v1alpha1.StepDecommissioned},
		"node gone, sent":       {v1alpha1.PhaseRemediated, v1alpha1.AttemptVerified, true, v1alpha1.PhaseRecovered, v1alpha1.StepDecommissioned},
	} {
		t.Run(name, func(t *testing.T) {
			nf := fencedIncident(tc.phase, tc.attempt)
			nf.Annotations = word
			f := newFixture(t, fixtureConfig(), append(threeNodes(), nf)...)
			f.authorize("bob")
			if tc.phase == v1alpha1.PhaseFencing {
				f.c.peers.pauses = pausedBy(t, map[string]string{"patch-night": "alice"})
			}
			if tc.delete {
				if err := f.kube.CoreV1().Nodes().Delete(context.Background(), "node-1", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			f.clock.Set(f0.Add(time.Minute))
			f.renewAllBut("node-1")
			f.sync("node-1")
			f.expectCalls()
			got := f.incident("node-1")
			if got.Status.Phase != tc.want || len(stepsOf(got, tc.step)) != 1 {
				t.Errorf("phase %s, timeline %+v: want %s with a %s step", got.Status.Phase, got.Status.Timeline, tc.want, tc.step)
			}
			for _, r := range f.requests() {
				if strings.HasPrefix(r, "update nodes") || strings.HasPrefix(r, "patch nodes") {
					t.Errorf("a cancel touched the node: %s", r)
				}
			}
		})
	}
}
