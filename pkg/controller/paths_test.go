package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/podrelease"
)

// More controller paths on the fixture (fixture_test.go), each with the requests it sends.

// enforceResourceVersions makes the fake API server refuse a NodeFence write at a stale
// resourceVersion, as the real one does (the fake's tracker takes any).
func (f *fixture) enforceResourceVersions() {
	f.dyn.PrependReactor("create", "nodefences", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*v1alpha1.NodeFence).ResourceVersion = "1"
		return false, nil, nil
	})
	f.dyn.PrependReactor("update", "nodefences", func(a k8stesting.Action) (bool, runtime.Object, error) {
		nf := a.(k8stesting.UpdateAction).GetObject().(*v1alpha1.NodeFence)
		cur, err := f.dyn.Tracker().Get(v1alpha1.NodeFenceResource, "", nf.Name)
		if err != nil {
			return false, nil, nil
		}
		if rv := cur.(*v1alpha1.NodeFence).ResourceVersion; rv != nf.ResourceVersion {
			return true, nil, apierrors.NewConflict(v1alpha1.Resource("nodefences"), nf.Name,
				fmt.Errorf("resourceVersion %s, stored %s", nf.ResourceVersion, rv))
		}
		n, _ := strconv.Atoi(nf.ResourceVersion)
		nf.ResourceVersion = strconv.Itoa(n + 1)
		return false, nil, nil
	})
}

func webPod(node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0", UID: "u1"},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

// TestFixtureRebootPowersOnAfterRelease: with action Reboot the node is powered on only
// after its workloads are released (after the last release write), never before: a node
// powered on while its pods still count as running on it could run them twice.
func TestFixtureRebootPowersOnAfterRelease(t *testing.T) {
	cfg := fixtureConfig()
	cfg.Policies[0].Action = v1alpha1.ActionReboot
	f := newFixture(t, cfg, append(threeNodes(), webPod("node-1"))...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1", "Unfence bmc-node-1")
	nf := f.incident("node-1")
	if nf.Status.Phase != v1alpha1.PhaseRemediated {
		t.Fatalf("phase %s, want Remediated (%s)", nf.Status.Phase, nf.Status.Message)
	}
	var order []string
	for _, s := range nf.Status.Timeline {
		switch s.Type {
		case v1alpha1.StepPodsDeleted, v1alpha1.StepRemediated, v1alpha1.StepPoweredOn:
			order = append(order, s.Type)
		}
	}
	if want := []string{v1alpha1.StepPodsDeleted, v1alpha1.StepRemediated, v1alpha1.StepPoweredOn}; strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("steps %v, want %v: power on only after the release", order, want)
	}
}

// TestFixtureRebootLeavesStorageFenced: the Reboot action powers on only what powered
// the node off. An agent that fences storage (no reboot among its actions: iSCSI, a
// NetworkFence) keeps its fence through the release; it is undone on the node's new boot.
func TestFixtureRebootLeavesStorageFenced(t *testing.T) {
	cfg := fixtureConfig()
	cfg.Policies[0].Action = v1alpha1.ActionReboot
	f := newFixture(t, cfg, threeNodes()...)
	f.bmc.Actions = []plugin.Action{plugin.ActionOff, plugin.ActionOn}
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
	nf := f.incident("node-1")
	if skipped := stepsOf(nf, v1alpha1.StepUnfenceSkipped); len(skipped) != 1 || !strings.Contains(skipped[0], "fences without powering the node off") {
		t.Errorf("UnfenceSkipped steps %q, want one saying the storage fence stays", skipped)
	}
}

// TestFixturePersonsRequestFencesLiveNode: a person's NodeFence fences a node whose Lease
// is renewing (the controller's own incident would be cancelled): the request stands, and
// the budget still applies to it.
func TestFixturePersonsRequestFencesLiveNode(t *testing.T) {
	nf := &v1alpha1.NodeFence{
		ObjectMeta: metav1.ObjectMeta{Name: "maint-1", ResourceVersion: "1", Labels: map[string]string{v1alpha1.NodeLabel: "node-1"}, CreationTimestamp: metav1.NewTime(f0)},
		Spec:       v1alpha1.NodeFenceSpec{NodeName: "node-1", RequestedBy: "alice", Reason: "disk controller hung"},
	}
	f := newFixture(t, fixtureConfig(), append(threeNodes(), nf)...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut()
	f.sync("node-1")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
	if got := f.incident("node-1"); got.Status.Phase != v1alpha1.PhaseRemediated {
		t.Errorf("phase %s, want Remediated (%s)", got.Status.Phase, got.Status.Message)
	}
	f.expectEvents(v1alpha1.ReasonFenceStarted, v1alpha1.ReasonRemediated)
}

// TestFixtureReleaseResumesAfterFailure: a release that fails halfway (the API server
// refuses a pod deletion) records what it did and leaves the incident Fenced; the next
// sync resumes from the record, and does not add the fenced taint a second time.
func TestFixtureReleaseResumesAfterFailure(t *testing.T) {
	f := newFixture(t, fixtureConfig(), append(threeNodes(), webPod("node-1"))...)
	refuse := true
	f.kube.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refuse {
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	if _, err := f.c.sync(context.Background(), "node-1"); err == nil || !strings.Contains(err.Error(), "request timed out") {
		t.Fatalf("sync: %v, want the refused deletion", err)
	}
	f.expectRequests("patch pods/status web-0", "get leases node-1",
		"update nodes", "update pods/status", "delete pods web-0",
		// before the Fence call, and the partial release on record (the fenced taint's
		// owner went on the node with it); no stale write of the detection follows (it
		// would be refused on its resourceVersion)
		"list nodefences", "create nodefences", "update nodefences/status", "update nodefences/status")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
	nf := f.incident("node-1")
	if nf.Status.Phase != v1alpha1.PhaseFenced || !slices.Equal(nf.Status.Remediation.TaintsAdded, []string{podrelease.FencedTaint.Key}) {
		t.Fatalf("phase %s, taints %v: want Fenced with the fenced taint recorded; timeline %+v", nf.Status.Phase, nf.Status.Remediation.TaintsAdded, nf.Status.Timeline)
	}
	// The informer brings the written incident and the tainted node back.
	if err := nfIndexer(f.c).Update(nf); err != nil {
		t.Fatal(err)
	}
	node, err := f.kube.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.cache(node)
	f.requests()
	refuse = false
	f.clock.Step(time.Second)
	f.sync("node-1")
	f.expectRequests(
		// the pod's NodeUnreachable condition (the cached pod predates the first try)
		"patch pods/status web-0",
		// the release from where it stopped: the fenced taint was added by the first try
		// (so the cached node, which has it, is read live); the cached pod predates the
		// first try's DisruptionTarget condition, so it is written again (refused on its
		// resourceVersion by a real API server, which the release ignores); one node
		// update adds out-of-service with its owner; Remediated is saved
		"get nodes node-1", "update pods/status", "delete pods web-0", "update nodes",
		"update nodefences/status")
	f.expectCalls()
	if got := f.incident("node-1"); got.Status.Phase != v1alpha1.PhaseRemediated || len(got.Status.Remediation.PodsDeleted) != 1 {
		t.Errorf("phase %s, pods deleted %v: want Remediated with web-0", got.Status.Phase, got.Status.Remediation.PodsDeleted)
	}
}

// TestFixtureFailedNodeGetsNoNewIncident: after a failed incident, a node still dead on
// the same boot gets no new automatic incident (a BMC that refuses would be called again
// and again); the retry annotation lets a new one open.
func TestFixtureFailedNodeGetsNoNewIncident(t *testing.T) {
	failed := fencedIncident(v1alpha1.PhaseFailed, v1alpha1.AttemptFailed)
	failed.Status.Message = "authentication failed"
	f := newFixture(t, fixtureConfig(), append(threeNodes(), failed)...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectRequests()
	f.expectCalls()

	failed = failed.DeepCopy()
	failed.Annotations = map[string]string{v1alpha1.RetryAnnotation: "true"}
	if err := nfIndexer(f.c).Update(failed); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(time.Second)
	f.sync("node-1")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
}

// TestFixtureOldestOpenIncidentDriven: two open incidents for one node (which invariant 3
// forbids, but a restore from backup can make) are not both driven: the older one is (its
// call found in flight is read back), and the newer one sends nothing.
func TestFixtureOldestOpenIncidentDriven(t *testing.T) {
	older := fencedIncident(v1alpha1.PhaseFencing, v1alpha1.AttemptFencing)
	newer := fencedIncident(v1alpha1.PhasePending, "")
	newer.Name, newer.CreationTimestamp = "node-1-y0", metav1.NewTime(f0.Add(time.Second))
	f := newFixture(t, fixtureConfig(), append(threeNodes(), newer, older)...)
	f.bmc.On = false // the older incident's call landed
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectCalls("Status bmc-node-1")
	for _, name := range []string{older.Name, newer.Name} {
		got, err := f.dyn.FencingV1alpha1().NodeFences().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := v1alpha1.PhasePending
		if name == older.Name {
			want = v1alpha1.PhaseRemediated
		}
		if got.Status.Phase != want {
			t.Errorf("%s: phase %s, want %s", name, got.Status.Phase, want)
		}
	}
}

// TestFixtureNotYetRecheck: a rate-limited incident waits exactly until the rate window
// lets the next fence start, not a fixed poll later.
func TestFixtureNotYetRecheck(t *testing.T) {
	cfg := fixtureConfig()
	cfg.Policies[0].Budget.RateLimit = v1alpha1.RateLimit{FencesPerMinute: 1, Burst: 1}
	recent := fencedIncident(v1alpha1.PhaseRecovered, v1alpha1.AttemptVerified)
	recent.Name, recent.Spec.NodeName, recent.Labels[v1alpha1.NodeLabel] = "node-3-x0", "node-3", "node-3"
	recent.Status.Timeline = append(recent.Status.Timeline, v1alpha1.Step{Time: metav1.NewMicroTime(f0.Add(30 * time.Second)), Type: v1alpha1.StepFenceStarted})
	f := newFixture(t, cfg, append(threeNodes(), recent)...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	after := f.sync("node-1")
	f.expectCalls()
	nf := f.incident("node-1")
	if nf.Status.Phase != v1alpha1.PhasePending && nf.Status.Phase != v1alpha1.PhaseHeld {
		t.Fatalf("phase %s, want Pending or Held (%s)", nf.Status.Phase, nf.Status.Message)
	}
	if after != 30*time.Second {
		t.Errorf("asks again in %s, want 30s, when the rate limit lets the next fence start (%s)", after, nf.Status.Message)
	}
}

// TestFixtureFailureToReleasedPerPolicy: the SLO's histogram counts from the failure
// (node-1's last Lease renewal, at f0), not from the incident or the fence, to the
// release (f0 + 1m), under the incident's policy.
func TestFixtureFailureToReleasedPerPolicy(t *testing.T) {
	f := newFixture(t, fixtureConfig(), append(threeNodes(), webPod("node-1"))...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	if nf := f.incident("node-1"); nf.Status.Phase != v1alpha1.PhaseRemediated {
		t.Fatalf("phase %s, want Remediated (%s)", nf.Status.Phase, nf.Status.Message)
	}
	mfs, err := f.c.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetName() != "kubefence_failure_to_released_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got = append(got, fmt.Sprintf("policy=%s count=%d sum=%gs", m.GetLabel()[0].GetValue(),
				m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()))
		}
	}
	if want := []string{"policy=default count=1 sum=60s"}; !slices.Equal(got, want) {
		t.Errorf("kubefence_failure_to_released_seconds: %v, want %v", got, want)
	}
}
