package incidents

import (
	"context"
	"errors"
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
