package orphans

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/podrelease"
)

var t0 = fixture.T0

// warning prefixes the Events the repair records: all are warnings.
const warning = corev1.EventTypeWarning + " "

// repairedStep is the type of the step a repair puts on the closed incident.
const repairedStep = v1alpha1.StepOrphanPrefix + v1alpha1.StepTaintsRemoved

// TestOrphanTaintsRemovedByTheirRecord: a leader that died between closing an incident
// and untainting its node leaves the node unschedulable (or, worse, out of service) with
// nobody to undo it. The next leader removes exactly the taints the closed incident
// recorded, not a person's, notes it on the incident and tells the user; once the node
// is clean, later rounds do nothing.
func TestOrphanTaintsRemovedByTheirRecord(t *testing.T) {
	nf := endedIncident("node-1-x0", "node-1", t0, podrelease.FencedTaint.Key, podrelease.OutOfServiceTaint.Key)
	h := newHarness(t, []corev1.Taint{podrelease.FencedTaint, foreignTaint, podrelease.OutOfServiceTaint}, nf)
	h.once()
	h.expectRequests("get nodes node-1", "update nodes", "update nodefences/status")
	if got := h.nodeTaints("node-1"); !slices.Equal(got, []string{foreignTaint.Key}) {
		t.Errorf("node-1 taints %v, want only %s", got, foreignTaint.Key)
	}
	got := h.incident(nf.Name)
	if got.Status.Phase != v1alpha1.PhaseRecovered || len(got.Status.Remediation.TaintsAdded) != 0 {
		t.Errorf("incident %s with taints %v recorded, want Recovered with none", got.Status.Phase, got.Status.Remediation.TaintsAdded)
	}
	if len(fixture.StepsOf(got, repairedStep)) == 0 {
		t.Errorf("no %s step in %+v", repairedStep, got.Status.Timeline)
	}
	if n := h.counted(Repaired); n != 1 {
		t.Errorf("kubefence_orphans_total{outcome=repaired} = %v, want 1", n)
	}
	h.expectEvents(warning + v1alpha1.ReasonOrphanRepaired + " on node-1-x0")
	if h.checks != 1 {
		t.Errorf("%d fresh Lease checks before the repair, want 1", h.checks)
	}

	// The watch brings the clean node: nothing left to do.
	h.catchUp("node-1")
	h.once()
	h.expectRequests()
	h.expectEvents()
}

// TestOrphanRepairNewestRecordFirst: a node with several closed incidents behind its
// taints is repaired one record a round, the newest first; each incident that is repaired
// records it, and in the end the node is clean.
func TestOrphanRepairNewestRecordFirst(t *testing.T) {
	older := endedIncident("node-1-a", "node-1", t0, podrelease.FencedTaint.Key)
	newer := endedIncident("node-1-b", "node-1", t0.Add(time.Hour), podrelease.OutOfServiceTaint.Key)
	h := newHarness(t, []corev1.Taint{podrelease.FencedTaint, podrelease.OutOfServiceTaint}, older, newer)
	for round, want := range [][]string{{podrelease.FencedTaint.Key}, nil} {
		h.once()
		if got := h.nodeTaints("node-1"); !slices.Equal(got, want) {
			t.Fatalf("round %d: node-1 taints %v, want %v", round+1, got, want)
		}
		h.catchUp("node-1")
	}
	for _, name := range []string{older.Name, newer.Name} {
		if got := h.incident(name); len(fixture.StepsOf(got, repairedStep)) == 0 {
			t.Errorf("%s: no repair step in %+v", name, got.Status.Timeline)
		}
	}
	if n := h.counted(Repaired); n != 2 {
		t.Errorf("kubefence_orphans_total{outcome=repaired} = %v, want 2", n)
	}
	h.expectEvents(warning+v1alpha1.ReasonOrphanRepaired+" on node-1-b", warning+v1alpha1.ReasonOrphanRepaired+" on node-1-a")
}

// TestOrphanTaintsLeftAlone: what kubefence cannot prove it owns is never touched: an
// open incident undoes its own changes, a node without kubefence's taints needs nothing
// whatever old records say, and the out-of-service taint with no record may be a
// person's (it is not even reported).
func TestOrphanTaintsLeftAlone(t *testing.T) {
	open := endedIncident("node-1-x0", "node-1", t0, podrelease.FencedTaint.Key)
	open.Status.Phase = v1alpha1.PhaseRemediated
	for name, tc := range map[string]struct {
		taints []corev1.Taint
		nf     *v1alpha1.NodeFence
	}{
		"an open incident owns its taints": {[]corev1.Taint{podrelease.FencedTaint}, open},
		"no kubefence taint on the node": {[]corev1.Taint{foreignTaint},
			endedIncident("node-1-x0", "node-1", t0, podrelease.FencedTaint.Key)},
		"out-of-service taint, no record": {[]corev1.Taint{podrelease.OutOfServiceTaint}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			var incs []*v1alpha1.NodeFence
			if tc.nf != nil {
				incs = append(incs, tc.nf)
			}
			h := newHarness(t, tc.taints, incs...)
			h.once()
			h.expectRequests()
			h.expectEvents()
			if got := h.nodeTaints("node-1"); len(got) != len(tc.taints) {
				t.Errorf("node-1 taints %v, want %d left", got, len(tc.taints))
			}
			if n := h.series(); n != 0 {
				t.Errorf("%d kubefence_orphans_total series, want none", n)
			}
			if h.checks+h.confirms != 0 {
				t.Errorf("%d Lease checks with nothing to change, want none", h.checks+h.confirms)
			}
		})
	}
}

// TestOrphanTaintsRemovedByTheirOwnerMark: a leader added the fenced taint and died
// before any save recorded it; the incident closed without it in its record (its node
// came back on a new boot before a successor released it), but the node's owner mark
// names the incident. The orphan repair removes the taint by that mark, and the mark
// with it; without the mark the taint would be reported and left for a person
// (TestOrphanFencedTaintReported).
func TestOrphanTaintsRemovedByTheirOwnerMark(t *testing.T) {
	h := newHarness(t, []corev1.Taint{podrelease.FencedTaint, foreignTaint}, endedIncident("node-1-x0", "node-1", t0))
	n := h.node("node-1")
	n.Annotations[podrelease.OwnerAnnotation] = "node-1-x0=" + podrelease.FencedTaint.Key
	h.setNode(n)
	h.once()
	h.expectRequests("get nodes node-1", "update nodes", "update nodefences/status")
	if got := h.nodeTaints("node-1"); !slices.Equal(got, []string{foreignTaint.Key}) {
		t.Errorf("node-1 taints %v, want only %s", got, foreignTaint.Key)
	}
	if mark, ok := h.node("node-1").Annotations[podrelease.OwnerAnnotation]; ok {
		t.Errorf("owner mark %q left on the node", mark)
	}
	h.expectEvents(warning + v1alpha1.ReasonOrphanRepaired + " on node-1-x0")
}

// TestOrphanFencedTaintReported: kubefence's own taint with no incident recording it is
// never guessed at (it could be a restored backup's, or a person's test): the node keeps
// it, and the user gets a warning Event on the node and a metric to alert on. The Event
// follows a Lease check.
func TestOrphanFencedTaintReported(t *testing.T) {
	h := newHarness(t, []corev1.Taint{podrelease.FencedTaint}, endedIncident("node-1-x0", "node-1", t0))
	h.once()
	h.expectRequests()
	if got := h.nodeTaints("node-1"); !slices.Equal(got, []string{podrelease.FencedTaint.Key}) {
		t.Errorf("node-1 taints %v, want the fenced taint kept", got)
	}
	ev := h.rec.take()
	if len(ev) != 1 || ev[0].typ+" "+ev[0].reason+" "+ev[0].message != "Warning "+v1alpha1.ReasonOrphanTaint+
		" Node node-1 carries fencing.kubefence.io/fenced but no incident records adding it; left in place for a person to check" ||
		ev[0].on != "node-1" {
		t.Errorf("events %+v, want one OrphanTaint on the node", ev)
	}
	if n := h.counted(Reported); n != 1 {
		t.Errorf("kubefence_orphans_total{outcome=reported} = %v, want 1", n)
	}
	if h.confirms != 1 {
		t.Errorf("%d Lease checks before the Event, want 1", h.confirms)
	}
}

// TestOrphanRepairFailureKeepsTheRecord: a repair the API server refuses changes nothing
// else: the record stays on the incident, so the next round tries again, and nothing
// claims a repair that did not happen.
func TestOrphanRepairFailureKeepsTheRecord(t *testing.T) {
	nf := endedIncident("node-1-x0", "node-1", t0, podrelease.FencedTaint.Key)
	h := newHarness(t, []corev1.Taint{podrelease.FencedTaint}, nf)
	h.kube.PrependReactor("update", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	})
	h.once()
	h.expectRequests("get nodes node-1", "update nodes")
	if got := h.incident(nf.Name).Status.Remediation.TaintsAdded; !slices.Equal(got, []string{podrelease.FencedTaint.Key}) {
		t.Errorf("recorded taints %v, want the record kept for the next round", got)
	}
	h.expectEvents()
	if n := h.series(); n != 0 {
		t.Errorf("%d kubefence_orphans_total series after a failed repair, want none", n)
	}
}

// TestOrphanStaleRecordClaimsNoRepair: a closed incident's record names a taint the node
// no longer carries (a person removed it), while the node carries kubefence's other taint
// that no record names. The stale record is cleared with a step that says so, and no
// Event, metric or step claims a repair that did not happen; the unrecorded taint is then
// reported for a person, not guessed at.
func TestOrphanStaleRecordClaimsNoRepair(t *testing.T) {
	nf := endedIncident("node-1-x0", "node-1", t0, podrelease.OutOfServiceTaint.Key)
	h := newHarness(t, []corev1.Taint{podrelease.FencedTaint}, nf)
	h.once()
	h.expectRequests("get nodes node-1", "update nodefences/status")
	h.expectEvents()
	if n := h.counted(Repaired); n != 0 {
		t.Errorf("kubefence_orphans_total{outcome=repaired} = %v, want 0: nothing was removed", n)
	}
	got := h.incident(nf.Name)
	tl := got.Status.Timeline
	if len(got.Status.Remediation.TaintsAdded) != 0 || len(tl) == 0 || !strings.Contains(tl[len(tl)-1].Message, "no longer on the node") {
		t.Errorf("record %v, timeline %+v: want the record cleared, saying the taint was gone", got.Status.Remediation.TaintsAdded, tl)
	}
	// The next round finds the fenced taint with no record behind it.
	fixture.Must(t, h.ncs.Update(got))
	h.once()
	h.expectRequests()
	h.expectEvents(warning + v1alpha1.ReasonOrphanTaint + " on node-1")
}

// TestOrphanRepairNeedsTheLease (invariant 2): a replica whose Lease check fails (it was
// deposed, or cannot reach the API server) changes nothing: no taint removed, no record
// cleared, no Event, nothing counted; the next round tries again.
func TestOrphanRepairNeedsTheLease(t *testing.T) {
	for name, tc := range map[string]struct {
		nf               *v1alpha1.NodeFence
		checks, confirms int
	}{
		"repair": {nf: endedIncident("node-1-x0", "node-1", t0, podrelease.FencedTaint.Key), checks: 1},
		"report": {confirms: 1},
	} {
		t.Run(name, func(t *testing.T) {
			var incs []*v1alpha1.NodeFence
			if tc.nf != nil {
				incs = append(incs, tc.nf)
			}
			h := newHarness(t, []corev1.Taint{podrelease.FencedTaint}, incs...)
			h.deposed = leader.ErrStaleEpoch
			h.once()
			h.expectRequests()
			h.expectEvents()
			if h.checks != tc.checks || h.confirms != tc.confirms {
				t.Errorf("%d fresh and %d recent Lease checks, want %d and %d", h.checks, h.confirms, tc.checks, tc.confirms)
			}
			if got := h.nodeTaints("node-1"); !slices.Equal(got, []string{podrelease.FencedTaint.Key}) {
				t.Errorf("node-1 taints %v, want the fenced taint kept", got)
			}
			if n := h.series(); n != 0 {
				t.Errorf("%d kubefence_orphans_total series, want none", n)
			}
			if tc.nf != nil {
				if got := h.incident(tc.nf.Name).Status.Remediation.TaintsAdded; len(got) != 1 {
					t.Errorf("recorded taints %v, want the record kept", got)
				}
			}
		})
	}
}

// TestOrphanRepairsEveryNode: one round looks at every node: a repair on one does not
// stop the report on another, and a node whose incidents are all clean is passed over.
func TestOrphanRepairsEveryNode(t *testing.T) {
	h := newHarness(t, []corev1.Taint{podrelease.FencedTaint}, endedIncident("node-1-x0", "node-1", t0, podrelease.FencedTaint.Key),
		endedIncident("node-3-x0", "node-3", t0))
	n2 := h.node("node-2")
	n2.Spec.Taints = []corev1.Taint{podrelease.FencedTaint}
	h.setNode(n2)
	h.once()
	h.expectRequests("get nodes node-1", "update nodes", "update nodefences/status")
	var got []string
	for _, e := range h.rec.take() {
		got = append(got, e.typ+" "+e.reason+" on "+e.on)
	}
	slices.Sort(got) // nodes come in the cache's order
	if want := []string{warning + v1alpha1.ReasonOrphanRepaired + " on node-1-x0", warning + v1alpha1.ReasonOrphanTaint + " on node-2"}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if r, p := h.counted(Repaired), h.counted(Reported); r != 1 || p != 1 {
		t.Errorf("kubefence_orphans_total repaired %v, reported %v; want 1 and 1", r, p)
	}
}
