package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/buildinfo"
)

// TestSaveRecordsWhoTookTheIncidentUp: the first save (incidents.Recorder.Save) of an open incident another leader
// wrote last adds a TakenUp step naming this replica, its release and the previous
// leader; later saves add none, nor does a save of a closed incident.
func TestSaveRecordsWhoTookTheIncidentUp(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		phase  v1alpha1.Phase
		leader string
		want   int
	}{
		"open, another leader's":    {v1alpha1.PhaseHeld, "old-leader", 1},
		"open, this replica's":      {v1alpha1.PhaseHeld, "", 0},
		"open, never written":       {v1alpha1.PhasePending, "-", 0},
		"closed, another leader's":  {v1alpha1.PhaseRecovered, "old-leader", 0},
		"fencing, another leader's": {v1alpha1.PhaseFencing, "old-leader", 1},
	} {
		t.Run(name, func(t *testing.T) {
			nf := pendingIncident(t0, nil)
			c := testController(t, nf)
			c.record.Identity = "new-leader"
			nf.Status.Phase = tc.phase
			switch tc.leader {
			case "":
				nf.Status.Leader = c.record.Identity
			case "-":
				nf.Status.Leader = ""
			default:
				nf.Status.Leader = tc.leader
			}
			for range 2 {
				if err := c.record.Save(context.Background(), nf); err != nil {
					t.Fatal(err)
				}
			}
			var taken []string
			for _, st := range stored(t, c, nf.Name).Status.Timeline {
				if st.Type == v1alpha1.StepTakenUp {
					taken = append(taken, st.Message)
				}
			}
			if len(taken) != tc.want {
				t.Fatalf("TakenUp steps %q, want %d", taken, tc.want)
			}
			if tc.want == 1 {
				for _, w := range []string{"taken up by " + c.record.Identity, "fence-controller " + buildinfo.Version(), "from old-leader"} {
					if !strings.Contains(taken[0], w) {
						t.Errorf("TakenUp %q does not say %q", taken[0], w)
					}
				}
			}
		})
	}
}

// TestTakenUpPrecedesWhatTheNewLeaderDid: the TakenUp step goes before the steps the new
// leader added to the incident as the old one left it, dated as the first of them, so
// that the timeline reads who did what (a read back verified across an upgrade was the
// new release's).
func TestTakenUpPrecedesWhatTheNewLeaderDid(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	left := pendingIncident(t0, nil)
	left.Status.Phase = v1alpha1.PhaseFencing
	c := testController(t, left)
	c.record.Identity = "new-leader"
	if err := c.opts.Caches.Fencing.Fencing().V1alpha1().NodeFences().Informer().GetIndexer().Add(left.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	nf := c.store.Get(left.Name).DeepCopy() // as a sync works on its copy
	readBack := t0.Add(90 * time.Second)
	c.record.StepAt(context.Background(), nf, readBack, v1alpha1.StepStateReadBack, "read off")
	c.record.StepAt(context.Background(), nf, readBack, v1alpha1.StepVerified, "level 1 read back as fenced")
	if err := c.record.Save(context.Background(), nf); err != nil {
		t.Fatal(err)
	}
	var types []string
	var takenAt time.Time
	for _, st := range stored(t, c, nf.Name).Status.Timeline {
		types = append(types, st.Type)
		if st.Type == v1alpha1.StepTakenUp {
			takenAt = st.Time.Time
		}
	}
	want := []string{v1alpha1.StepDetected, v1alpha1.StepTakenUp, v1alpha1.StepStateReadBack, v1alpha1.StepVerified}
	if strings.Join(types, ",") != strings.Join(want, ",") || !takenAt.Equal(readBack) {
		t.Errorf("timeline %v, TakenUp at %s; want %v, TakenUp at %s", types, takenAt, want, readBack)
	}
}
