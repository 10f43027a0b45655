package detector

import (
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var testThresholds = Thresholds{LeaseStaleAfter: 30 * time.Second, NotReadyAfter: 30 * time.Second,
	FlapWindow: 10 * time.Minute, FlapThreshold: 3}

// ev is one scripted event at t0+at: a Lease renewal (renewed at the node's clock, which
// is skewed on purpose), a Ready status change, a new boot ID.
type ev struct {
	at    time.Duration
	renew bool
	ready corev1.ConditionStatus
	boot  string
}

// script feeds events to a detector and returns it with the node as last seen.
type script struct {
	d    *Detector
	node *corev1.Node
}

func run(events ...ev) *script { return runWith(testThresholds, 0, events...) }

// runWith is run with other thresholds and a Lease that states leaseDurationSeconds
// (none when zero).
func runWith(th Thresholds, duration int32, events ...ev) *script {
	s := &script{d: New(th), node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
	s.node.Status.NodeInfo.BootID = "boot-1"
	s.node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at < events[j].at })
	for _, e := range events {
		now := t0.Add(e.at)
		if e.renew {
			skewed := metav1.NewMicroTime(now.Add(-7 * time.Hour))
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
				Spec: coordinationv1.LeaseSpec{RenewTime: &skewed}}
			if duration > 0 {
				lease.Spec.LeaseDurationSeconds = &duration
			}
			s.d.ObserveLease(lease, now)
		}
		if e.ready != "" && e.ready != s.node.Status.Conditions[0].Status {
			s.node.Status.Conditions[0].Status = e.ready
			s.node.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now)
		}
		if e.boot != "" {
			s.node.Status.NodeInfo.BootID = e.boot
		}
		s.d.Assess(s.node, now)
	}
	return s
}

// every renews the Lease every 10s from from to to (inclusive).
func every(from, to time.Duration) []ev {
	var out []ev
	for at := from; at <= to; at += 10 * time.Second {
		out = append(out, ev{at: at, renew: true})
	}
	return out
}

func cat(parts ...[]ev) []ev {
	var out []ev
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// lapses makes n outages of 20s (a missed renewal, less than the threshold) a minute apart.
func lapses(n int) []ev {
	var out []ev
	for i := range n {
		base := time.Duration(i) * time.Minute
		out = append(out, every(base, base+30*time.Second)...)
		out = append(out, ev{at: base + 50*time.Second, renew: true})
	}
	return out
}

func TestAssess(t *testing.T) {
	tests := map[string]struct {
		events      []ev
		at          time.Duration
		health      Health
		undamped    Health
		reason      string
		unhealthyAt time.Duration // from t0; -1 for zero
		evidence    []string
		flaps       int
	}{
		"renewing: healthy": {
			events: every(0, 60*time.Second), at: 65 * time.Second, health: Healthy, reason: ReasonHealthy, unhealthyAt: 90 * time.Second,
			evidence: []string{"lease last renewed at 2026-03-01T05:01:00Z"},
		},
		"no lease yet, Ready: healthy": {
			at: 0, health: Healthy, reason: ReasonHealthy, unhealthyAt: -1,
		},
		"lease stale for half the threshold: suspect": {
			events: every(0, 10*time.Second), at: 26 * time.Second, health: Suspect, reason: ReasonLeaseStale, unhealthyAt: 40 * time.Second,
		},
		"lease stale past the threshold: unhealthy": {
			events: every(0, 10*time.Second), at: 40 * time.Second, health: Unhealthy, reason: ReasonLeaseStale, unhealthyAt: 40 * time.Second,
			evidence: []string{"seen 30s ago, threshold 30s"},
		},
		"recovered before the threshold: the clock restarts": {
			events: cat(every(0, 10*time.Second), every(35*time.Second, 35*time.Second)), at: 45 * time.Second,
			health: Healthy, reason: ReasonHealthy, unhealthyAt: 65 * time.Second, flaps: 1,
		},
		// A kubelet renewing on its cadence is alive (invariant 10): Ready alone only
		// makes it suspect, until the Lease too is silent for the floor.
		"Ready Unknown past the threshold while the lease renews: suspect": {
			events: cat(every(0, 60*time.Second), []ev{{at: 10 * time.Second, ready: corev1.ConditionUnknown}}), at: 65 * time.Second,
			health: Suspect, reason: ReasonNotReady, unhealthyAt: 90 * time.Second, evidence: []string{"Ready=Unknown"},
		},
		"Ready Unknown and the lease silent for the floor: unhealthy": {
			events: cat(every(0, 60*time.Second), []ev{{at: 10 * time.Second, ready: corev1.ConditionUnknown}}), at: 90 * time.Second,
			health: Unhealthy, reason: ReasonLeaseStale, unhealthyAt: 90 * time.Second, evidence: []string{"seen 30s ago"},
		},
		"Ready False just now: suspect": {
			events: cat(every(0, 60*time.Second), []ev{{at: 60 * time.Second, ready: corev1.ConditionFalse}}), at: 61 * time.Second,
			health: Suspect, reason: ReasonNotReady, unhealthyAt: 90 * time.Second,
		},
		"two lapses: not flapping": {
			events: lapses(2), at: 2 * time.Minute, health: Healthy, reason: ReasonHealthy, unhealthyAt: 140 * time.Second, flaps: 2,
		},
		"three lapses within the window: flapping, with evidence": {
			events: lapses(3), at: 3 * time.Minute, health: Flapping, undamped: Healthy, reason: ReasonFlapping,
			unhealthyAt: 10*time.Minute + 50*time.Second, flaps: 3,
			evidence: []string{"recovered 3 times within 10m0s", "2026-03-01T12:00:50Z, 2026-03-01T12:01:50Z, 2026-03-01T12:02:50Z", "now healthy"},
		},
		"flapping node that dies: flapping, not unhealthy, until the window passes": {
			events: lapses(3), at: 5 * time.Minute, health: Flapping, undamped: Unhealthy, reason: ReasonFlapping,
			unhealthyAt: 10*time.Minute + 50*time.Second, flaps: 3, evidence: []string{"now unhealthy"},
		},
		"flapping node dead past the window: unhealthy": {
			events: lapses(3), at: 11 * time.Minute, health: Unhealthy, reason: ReasonLeaseStale, unhealthyAt: 3*time.Minute + 20*time.Second, flaps: 2,
		},
		"Ready recoveries count as flaps": {
			events: cat(every(0, 5*time.Minute), []ev{
				{at: 10 * time.Second, ready: corev1.ConditionFalse}, {at: 20 * time.Second, ready: corev1.ConditionTrue},
				{at: 90 * time.Second, ready: corev1.ConditionFalse}, {at: 100 * time.Second, ready: corev1.ConditionTrue},
				{at: 190 * time.Second, ready: corev1.ConditionFalse}, {at: 200 * time.Second, ready: corev1.ConditionTrue},
			}), at: 5 * time.Minute, health: Flapping, undamped: Healthy, reason: ReasonFlapping, unhealthyAt: 10*time.Minute + 20*time.Second, flaps: 3,
		},
		"a Ready recovery right after a lease recovery is one flap": {
			events: cat(every(0, 10*time.Second), []ev{{at: 55 * time.Second, ready: corev1.ConditionUnknown}},
				every(60*time.Second, 90*time.Second), []ev{{at: 61 * time.Second, ready: corev1.ConditionTrue}}),
			at: 90 * time.Second, health: Healthy, reason: ReasonHealthy, unhealthyAt: 120 * time.Second, flaps: 1,
		},
		"new boot ID: recorded": {
			events: cat(every(0, 30*time.Second), []ev{{at: 20 * time.Second, boot: "boot-2"}}), at: 30 * time.Second,
			health: Healthy, reason: ReasonHealthy, unhealthyAt: 60 * time.Second, evidence: []string{"rebooted: boot ID boot-2, was boot-1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := run(tc.events...)
			obs := s.d.Assess(s.node, t0.Add(tc.at))
			want := tc.undamped
			if want == "" {
				want = tc.health
			}
			wantAt := time.Time{}
			if tc.unhealthyAt >= 0 {
				wantAt = t0.Add(tc.unhealthyAt)
			}
			if obs.Health != tc.health || obs.Damping.Undamped != want || obs.Reason != tc.reason || !obs.UnhealthyAt.Equal(wantAt) || obs.Damping.Flaps != tc.flaps {
				t.Errorf("Assess = %s (undamped %s) %s unhealthy at +%s flaps %d; want %s (%s) %s +%s flaps %d\nevidence: %s",
					obs.Health, obs.Damping.Undamped, obs.Reason, obs.UnhealthyAt.Sub(t0), obs.Damping.Flaps,
					tc.health, want, tc.reason, wantAt.Sub(t0), tc.flaps, obs.Evidence)
			}
			for _, e := range tc.evidence {
				if !strings.Contains(obs.Evidence, e) {
					t.Errorf("evidence %q lacks %q", obs.Evidence, e)
				}
			}
			// A survey of the same node sees the same and says nothing in words.
			s2 := run(tc.events...)
			survey := s2.d.SurveyWith(s2.node, t0.Add(tc.at), s2.d.th.LeaseStaleAfter, s2.d.th.NotReadyAfter)
			if obs.Evidence == "" && tc.evidence != nil {
				t.Fatal("no evidence to leave out")
			}
			obs.Evidence = ""
			if !reflect.DeepEqual(survey, obs) {
				t.Errorf("SurveyWith = %+v\nwant AssessWith without its evidence: %+v", survey, obs)
			}
		})
	}
}

// TestRestartClocks: staleness gathered before a leadership change (an API server
// blackout in which no kubelet could renew) does not count; it starts again from the
// take-over, so a dead node is found one threshold later and a live one not at all.
func TestRestartClocks(t *testing.T) {
	d := New(Thresholds{LeaseStaleAfter: 10 * time.Second, NotReadyAfter: 10 * time.Second})
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	renew := metav1.NewMicroTime(t0)
	d.ObserveLease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}, t0)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	if got := d.Assess(node, t0.Add(13*time.Second)).Health; got != Unhealthy {
		t.Fatalf("before the restart: %s, want Unhealthy", got)
	}
	d.RestartClocks(t0.Add(13 * time.Second))
	if got := d.Assess(node, t0.Add(14*time.Second)).Health; got == Unhealthy {
		t.Errorf("right after the restart: Unhealthy on staleness gathered before it")
	}
	if got := d.Assess(node, t0.Add(24*time.Second)).Health; got != Unhealthy {
		t.Errorf("a threshold after the restart with no renewal: %s, want Unhealthy", got)
	}
}

// TestRenewalSeen: only a renewTime change seen by this process counts as a renewal seen;
// the first sighting of a Lease and a restart of the clocks look Healthy for a while but
// prove nothing about the kubelet.
func TestRenewalSeen(t *testing.T) {
	d := New(Thresholds{LeaseStaleAfter: 10 * time.Second, NotReadyAfter: 10 * time.Second})
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	lease := func(at time.Time) *coordinationv1.Lease {
		r := metav1.NewMicroTime(at)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: coordinationv1.LeaseSpec{RenewTime: &r}}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	d.ObserveLease(lease(t0), t0)
	d.ObserveLease(lease(t0), t0.Add(time.Second))
	if n := d.Measured(); n != 0 {
		t.Errorf("%d nodes with a measured cadence after one renewTime seen, want 0", n)
	}
	d.RestartClocks(t0.Add(2 * time.Second))
	obs := d.Assess(node, t0.Add(3*time.Second))
	if obs.Health != Healthy || !obs.Kubelet.RenewalSeen.IsZero() {
		t.Fatalf("first sighting and restart: health %s, renewal seen %s; want Healthy with no renewal seen", obs.Health, obs.Kubelet.RenewalSeen)
	}
	d.ObserveLease(lease(t0.Add(4*time.Second)), t0.Add(4*time.Second))
	if n := d.Measured(); n != 1 {
		t.Errorf("%d nodes with a measured cadence after a renewal, want 1", n)
	}
	d.RestartClocks(t0.Add(5 * time.Second))
	if got := d.Assess(node, t0.Add(6*time.Second)).Kubelet.RenewalSeen; !got.Equal(t0.Add(4 * time.Second)) {
		t.Errorf("renewal seen %s, want %s (the change, not the restart)", got, t0.Add(4*time.Second))
	}
}
