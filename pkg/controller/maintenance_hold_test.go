package controller

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/policy"
)

// The incident loop's maintenance hold: what the node's caches say is left to release,
// the policy's hold and its window, and whose incidents it holds. What counts as a
// maintenance signal is tested in pkg/maintenance (signal_test.go).

// TestCordonedNodeHeldOnlyOnceDrained: a cordoned node that dies with nothing left to
// release is held with reason Maintenance and no agent is called, until the maintenance
// window has passed since its last renewal; then it is fenced. A cordoned node that still
// has a pod and a volume attached is fenced at once (maintenance.cordoned: WhenDrained).
func TestCordonedNodeHeldOnlyOnceDrained(t *testing.T) {
	for name, tc := range map[string]struct {
		workload bool
		held     bool
	}{
		"cordoned and drained: held":                        {held: true},
		"cordoned with a pod and a volume attached: fenced": {workload: true},
	} {
		t.Run(name, func(t *testing.T) {
			objs := threeNodes()
			objs[0].(*corev1.Node).Spec.Unschedulable = true
			if tc.workload {
				pod, va := fixturePodAndAttachment()
				objs = append(objs, pod, va)
			}
			f := newFixture(t, fixtureConfig(), objs...)
			f.clock.Set(f0.Add(time.Minute))
			f.renewAllBut("node-1")
			f.sync("node-1")
			nf := f.incident("node-1")
			if !tc.held {
				f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
				if nf.Status.Phase != v1alpha1.PhaseRemediated {
					t.Errorf("phase %s (%q), want Remediated", nf.Status.Phase, nf.Status.Message)
				}
				return
			}
			f.expectCalls()
			holdsFor(t, nf, policy.ReasonMaintenance, "cordoned (spec.unschedulable) and drained")
			if !strings.Contains(nf.Status.Message, "held until 2026") {
				t.Errorf("hold message %q does not say when it ends", nf.Status.Message)
			}
			// The default window is 1h from the last renewal (f0).
			f.clock.Set(f0.Add(time.Hour - time.Second))
			f.renewAllBut("node-1")
			f.sync("node-1")
			f.expectCalls()
			f.clock.Set(f0.Add(time.Hour + time.Second))
			f.renewAllBut("node-1")
			f.sync("node-1")
			f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
		})
	}
}

// TestPersonsRequestNotHeldForMaintenance: a person's NodeFence for a cordoned, drained
// node (a drill) is fenced; the maintenance hold is for the controller's own incidents and
// health checkers' requests.
func TestPersonsRequestNotHeldForMaintenance(t *testing.T) {
	objs := threeNodes()
	objs[0].(*corev1.Node).Spec.Unschedulable = true
	nf := fencedIncident(v1alpha1.PhasePending, "")
	nf.Spec.RequestedBy, nf.Status = "alice", v1alpha1.NodeFenceStatus{}
	f := newFixture(t, fixtureConfig(), append(objs, runtime.Object(nf))...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
}

// holdsFor checks that nf is Held and its latest hold step is for reason, with want in it.
func holdsFor(t *testing.T, nf *v1alpha1.NodeFence, reason, want string) {
	t.Helper()
	holds := stepsOf(nf, v1alpha1.StepHold)
	if nf.Status.Phase != v1alpha1.PhaseHeld || len(holds) == 0 {
		t.Fatalf("phase %s (%q), hold steps %q: want Held for %s", nf.Status.Phase, nf.Status.Message, holds, reason)
	}
	if last := holds[len(holds)-1]; !strings.HasPrefix(last, reason+":") || !strings.Contains(last, want) {
		t.Errorf("hold step %q, want %s naming %q", last, reason, want)
	}
}
