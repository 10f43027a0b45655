package detector

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFreshProperty: over 2,000 generated histories (Lease renewals on a jittered
// cadence with lapses, Ready going False or Unknown and back, heartbeats, reboots, flap
// thresholds), whenever Fresh says a node is fresh, AssessWith with any thresholds finds
// it Healthy, not Suspect or Flapping, and changes nothing of what the detector keeps:
// the survey that skips the assessment of fresh nodes sees what the assessment would.
// It also checks that Fresh is not always false, or the property would hold trivially.
func TestFreshProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 2026))
	t0 := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	fresh := 0
	for c := range 2000 {
		th := Thresholds{LeaseStaleAfter: dur(time.Second, time.Minute), NotReadyAfter: dur(0, time.Minute),
			FlapWindow: dur(0, 5*time.Minute), FlapThreshold: rng.IntN(4)}
		if rng.IntN(2) == 0 {
			th.ExpectedRenewInterval = dur(0, 20*time.Second)
		}
		d := New(th)
		cadence := dur(500*time.Millisecond, 15*time.Second)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
		node.Status.NodeInfo.BootID = "b0"
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		now, renew := t0, t0
		for step := range 200 {
			switch rng.IntN(6) {
			case 0, 1, 2: // a renewal, sometimes after a lapse
				gap := cadence + dur(0, cadence/4)
				if rng.IntN(8) == 0 {
					gap = dur(cadence, 10*cadence)
				}
				renew = renew.Add(gap)
				now = renew.Add(dur(0, cadence/4))
				rt := metav1.NewMicroTime(renew)
				d.ObserveLease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n"},
					Spec: coordinationv1.LeaseSpec{RenewTime: &rt, LeaseDurationSeconds: ptrInt32(int32(4 * cadence / time.Second))}}, now)
			case 3: // Ready changes, or its heartbeat
				ready := &node.Status.Conditions[0]
				ready.Status = []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}[rng.IntN(4)]
				ready.LastHeartbeatTime = metav1.NewTime(now)
				ready.LastTransitionTime = metav1.NewTime(now.Add(-dur(0, time.Minute)))
			case 4: // a reboot
				if rng.IntN(4) == 0 {
					node.Status.NodeInfo.BootID = "b" + time.Duration(step).String()
				}
			default: // time passes
				now = now.Add(dur(0, 2*cadence))
			}
			if !d.Fresh(node, now) {
				if rng.IntN(2) == 0 {
					d.AssessWith(node, now, dur(0, time.Minute), dur(0, time.Minute))
				}
				continue
			}
			fresh++
			before := d.snapshot("n")
			obs := d.AssessWith(node, now, dur(0, time.Minute), dur(0, time.Minute))
			if obs.Health != Healthy || obs.Damping.Undamped != Healthy {
				t.Fatalf("case %d step %d: fresh, but assessed %s (undamped %s): %s", c, step, obs.Health, obs.Damping.Undamped, obs.Evidence)
			}
			if after := d.snapshot("n"); !reflect.DeepEqual(before, after) {
				t.Fatalf("case %d step %d: fresh, but the assessment changed the node's state:\n%+v\n%+v", c, step, before, after)
			}
		}
	}
	if fresh < 1000 {
		t.Fatalf("only %d fresh looks in 400,000 steps: the property says little", fresh)
	}
	t.Logf("%d fresh looks checked", fresh)
}

func (d *Detector) snapshot(name string) nodeState {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := *d.nodes[name]
	st.lease.gaps, st.flaps = slices.Clone(st.lease.gaps), slices.Clone(st.flaps)
	return st
}

func ptrInt32(v int32) *int32 { return &v }

// TestLastLifeCountsAProbeAnswer: a kubelet that answered a probe after its Lease went
// silent was alive then: LastLife says so, so that a watchdog fence or an off read it
// contradicts is not counted. A probe left unanswered is no sign of life.
func TestLastLifeCountsAProbeAnswer(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	renew := metav1.NewMicroTime(t0)
	d := New(Thresholds{LeaseStaleAfter: 30 * time.Second, Heartbeats: true})
	d.ObserveLease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}, t0)
	before := d.LastLife("node-1")
	d.ObserveKubeletProbe("node-1", t0.Add(20*time.Second), false)
	if got := d.LastLife("node-1"); !got.Equal(before) {
		t.Errorf("LastLife after an unanswered probe = %s, want %s as before it", got, before)
	}
	d.ObserveKubeletProbe("node-1", t0.Add(40*time.Second), true)
	if got, want := d.LastLife("node-1"), t0.Add(40*time.Second); !got.Equal(want) {
		t.Errorf("LastLife after an answered probe = %s, want %s", got, want)
	}
}
