package incidents

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	fencinginformers "github.com/kubefence/kubefence/pkg/generated/informers/externalversions"
	"github.com/kubefence/kubefence/pkg/leader"
)

// fakeGuard is a Guard whose confirmation fails with err, at epoch.
type fakeGuard struct {
	err     error
	epoch   int64
	deposed []error
}

func (g *fakeGuard) Confirmed(context.Context) error { return g.err }
func (g *fakeGuard) Epoch() int64                    { return g.epoch }
func (g *fakeGuard) Deposed(err error) {
	if errors.Is(err, leader.ErrStaleEpoch) {
		g.deposed = append(g.deposed, err)
	}
}

// TestRecorderSave: an incident's Events wait for a save that the guard confirmed and the
// API server took at the guard's epoch; a save refused for its epoch deposes the replica
// and sends nothing.
func TestRecorderSave(t *testing.T) {
	now := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		guard     fakeGuard
		stored    int64 // the epoch the API server has on the incident
		wantErr   bool
		wantEvent bool
		deposed   bool
	}{
		"confirmed, at its epoch":    {guard: fakeGuard{epoch: 2}, stored: 2, wantEvent: true},
		"not confirmed":              {guard: fakeGuard{epoch: 2, err: errors.New("lease read failed")}, stored: 2, wantErr: true},
		"a newer leader wrote first": {guard: fakeGuard{epoch: 2}, stored: 3, wantErr: true, deposed: true},
	} {
		t.Run(name, func(t *testing.T) {
			nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-1-x1"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "node-1"},
				Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Epoch: tc.stored, Leader: "me"}}
			client := fencingfake.NewSimpleClientset(nf)
			inf := fencinginformers.NewSharedInformerFactory(client, 0).Fencing().V1alpha1().NodeFences().Informer()
			store, err := New(client.FencingV1alpha1().NodeFences(), inf)
			if err != nil {
				t.Fatal(err)
			}
			events := record.NewFakeRecorder(10)
			g := tc.guard
			r := &Recorder{Store: store, Guard: &g, Identity: "me", Events: events, Now: func() time.Time { return now }}
			mine := nf.DeepCopy()
			r.Step(context.Background(), mine, v1alpha1.StepAgentCalled, "agent ipmi called")
			r.Event(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, mine, corev1.EventTypeNormal, v1alpha1.ReasonFenced, "verified")
			if len(events.Events) != 0 || r.Held(nf.Name) != 1 {
				t.Fatalf("before the save: %d sent, %d held; want 0 sent, 1 held", len(events.Events), r.Held(nf.Name))
			}
			err = r.Save(context.Background(), mine)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Save = %v, want an error %v", err, tc.wantErr)
			}
			if got := len(events.Events) == 1; got != tc.wantEvent {
				t.Errorf("Event sent %v, want %v", got, tc.wantEvent)
			}
			if got := len(g.deposed) == 1; got != tc.deposed {
				t.Errorf("deposed %v, want %v", g.deposed, tc.deposed)
			}
			if tc.wantErr {
				return
			}
			if mine.Status.Epoch != g.epoch || mine.Status.Leader != "me" || len(mine.Status.Timeline) != 1 ||
				!mine.Status.Timeline[0].Time.Time.Equal(now) {
				t.Errorf("saved status %+v, want epoch %d, leader me, one step at %s", mine.Status, g.epoch, now)
			}
		})
	}
}

// TestRecorderEventOfNoIncident: an Event of no incident goes out at once (it follows a
// Lease check of its own), and none without an Event recorder.
func TestRecorderEventOfNoIncident(t *testing.T) {
	events := record.NewFakeRecorder(10)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	(&Recorder{Events: events}).Event(node, nil, corev1.EventTypeWarning, v1alpha1.ReasonOrphanTaint, "taint %s", "x")
	if len(events.Events) != 1 {
		t.Fatalf("%d Events sent, want 1", len(events.Events))
	}
	(&Recorder{}).Event(node, nil, corev1.EventTypeWarning, v1alpha1.ReasonOrphanTaint, "no recorder")
}

// fencingNow is a Fencing that counts n nodes fencing.
type fencingNow int

func (n *fencingNow) FencingNow([]*v1alpha1.NodeFence, time.Time) int { return int(*n) }

// eventsRecorder is a Recorder of an incident of node-1 the fake API server holds, its
// Event recorder, and the count of nodes fencing it tells a storm by.
func eventsRecorder(t *testing.T) (*Recorder, *v1alpha1.NodeFence, *corev1.Node, *fencingNow) {
	t.Helper()
	nf := &v1alpha1.NodeFence{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "NodeFence"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1-x"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "node-1"},
		Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseRemediated, Epoch: 1, Leader: "me"}}
	client := fencingfake.NewSimpleClientset(nf)
	store, err := New(client.FencingV1alpha1().NodeFences(), fencinginformers.NewSharedInformerFactory(client, 0).Fencing().V1alpha1().NodeFences().Informer())
	if err != nil {
		t.Fatal(err)
	}
	fencing := new(fencingNow)
	now := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	r := &Recorder{Store: store, Guard: &fakeGuard{epoch: 1}, Identity: "me", Events: record.NewFakeRecorder(100),
		Now: func() time.Time { return now }, Fencing: fencing}
	return r, nf.DeepCopy(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, fencing
}

// saveAndDrain saves nf and returns the Events the save sent, as the fake recorder has
// them ("Type Reason message").
func saveAndDrain(t *testing.T, r *Recorder, nf *v1alpha1.NodeFence) []string {
	t.Helper()
	if err := r.Save(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	rec := r.Events.(*record.FakeRecorder)
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	return got
}

func expectEvents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

// TestEventsWaitForTheSave: an incident's events go out only after the save that checks
// the leader Lease (a paused leader's "Detected" and "verified fenced" events
// landed after the standby took over, because they were sent before the save).
func TestEventsWaitForTheSave(t *testing.T) {
	r, nf, node, _ := eventsRecorder(t)
	rec := r.Events.(*record.FakeRecorder)
	r.Event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonRemediated, "node %s", node.Name)
	if n := len(rec.Events); n != 0 {
		t.Fatalf("%d events sent before the save", n)
	}
	if err := r.Save(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Events); n != 1 {
		t.Fatalf("%d events after the save, want 1 (on the node)", n)
	}
	r.Event(node, nf, corev1.EventTypeNormal, "Other", "x")
	r.Drop(nf.Name)
	if err := r.Save(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Events); n != 1 {
		t.Errorf("a dropped incident's event was sent: %d events", n)
	}
}

// TestEventOnNodeOnly: an incident's Event goes on its node, once (a copy on the
// incident as well doubled the Events per incident, and its timeline holds the same
// steps); on the incident only when the node is gone.
func TestEventOnNodeOnly(t *testing.T) {
	r, nf, node, _ := eventsRecorder(t)
	rec := r.Events.(*record.FakeRecorder)
	rec.IncludeObject = true
	r.Event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonRemediated, "with node")
	r.Event(nil, nf, corev1.EventTypeNormal, v1alpha1.ReasonRemediated, "node gone")
	if err := r.Save(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	if len(got) != 2 || strings.Contains(got[0], "NodeFence") || !strings.Contains(got[1], "kind=NodeFence,") {
		t.Errorf("events %q, want one on the Node, then one on the NodeFence", got)
	}
}

// TestEventsFold: an incident opened and fenced before its first save sends one Event
// that says both, and one verified and released sends one more: two instead of four.
// Nothing is saved between the verified fence and the release's end, so the Fenced Event
// is still waiting when the Remediated one comes, and goes out on its own when the
// release failed and what was done is saved. A held incident keeps its Detected Event.
func TestEventsFold(t *testing.T) {
	r, nf, node, _ := eventsRecorder(t)
	save := func() []string { t.Helper(); return saveAndDrain(t, r, nf) }
	r.Event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonDetected, "Node %s is unhealthy", node.Name)
	r.Event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonFenceStarted, "Fencing node %s", node.Name)
	expectEvents(t, save(), "Warning FenceStarted Node "+node.Name+" is unhealthy. Fencing node "+node.Name)
	nf.Status.Phase = v1alpha1.PhaseFenced
	r.Event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonFenced, "verified")
	r.Event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonRemediated, "released")
	expectEvents(t, save(), "Normal Remediated verified. released")

	r.Event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonFenced, "verified")
	expectEvents(t, save(), "Normal Fenced verified") // the release failed: what was done is saved

	// The node booted again before anything was released: the incident is saved
	// Remediated with the release skipped, and nothing is left to join the Fenced Event.
	r.Event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonFenced, "verified")
	nf.Status.Phase = v1alpha1.PhaseRemediated
	expectEvents(t, save(), "Normal Fenced verified")
	r.Event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonDetected, "held")
	r.Event(node, nf, corev1.EventTypeWarning, "BudgetExceeded", "held")
	expectEvents(t, save(), "Warning Detected held", "Warning BudgetExceeded held")
}

// TestEventsFoldInAStorm: with StormAt nodes fencing at once, an incident's start is no
// Event of its own: it waits through the fence and opens the Event that ends it,
// Remediated or FenceFailed. Below it, the start goes out at the save before the agent
// call, as an operator watching one node needs it.
func TestEventsFoldInAStorm(t *testing.T) {
	r, nf, node, fencing := eventsRecorder(t)
	save := func(phase v1alpha1.Phase) []string {
		t.Helper()
		nf.Status.Phase = phase
		return saveAndDrain(t, r, nf)
	}
	start := func() {
		r.Event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonDetected, "unhealthy")
		r.Event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonFenceStarted, "fencing")
	}
	// Calm: the start is told before the agent is called.
	*fencing = StormAt - 1
	start()
	expectEvents(t, save(v1alpha1.PhaseFencing), "Warning FenceStarted unhealthy. fencing")

	*fencing = StormAt
	start()
	expectEvents(t, save(v1alpha1.PhaseFencing)) // before the agent call
	expectEvents(t, save(v1alpha1.PhaseFencing)) // the call's outcome
	r.Event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonFenced, "verified")
	r.Event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonRemediated, "released")
	expectEvents(t, save(v1alpha1.PhaseRemediated), "Normal Remediated unhealthy. fencing. verified. released")

	start()
	expectEvents(t, save(v1alpha1.PhaseFencing))
	r.Event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonFenceFailed, "every level failed")
	expectEvents(t, save(v1alpha1.PhaseFailed), "Warning FenceFailed unhealthy. fencing. every level failed")

	// Another Event during the fence goes out at once, the held start before it.
	start()
	expectEvents(t, save(v1alpha1.PhaseFencing))
	r.Event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonAgentDown, "level 1 skipped")
	expectEvents(t, save(v1alpha1.PhaseFencing), "Warning FenceStarted unhealthy. fencing", "Warning AgentDown level 1 skipped")
}
