package detector

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAssessWithShortThreshold: no threshold, configured or shortened for workloads, goes
// below the evidence floor (safety invariant 10).
func TestAssessWithShortThreshold(t *testing.T) {
	tests := map[string]struct {
		events   []ev
		duration int32 // the Lease's leaseDurationSeconds; 0 for none
		expected time.Duration
		lease    time.Duration
		at       time.Duration
		health   Health
	}{
		// Renewals every 10s: a 5s wait is raised to 30s, three renewal periods.
		"5s wait, 21s since renewal: suspect":       {events: every(0, 60*time.Second), lease: 5 * time.Second, at: 81 * time.Second, health: Suspect},
		"5s wait, 29s since renewal: still suspect": {events: every(0, 60*time.Second), lease: 5 * time.Second, at: 89 * time.Second, health: Suspect},
		"5s wait, 30s since renewal: unhealthy":     {events: every(0, 60*time.Second), lease: 5 * time.Second, at: 90 * time.Second, health: Unhealthy},
		// First sighting only: no cadence measured. Without leaseDurationSeconds the floor
		// is the configured threshold.
		"no cadence, no lease duration: configured threshold": {events: every(0, 0), lease: 5 * time.Second, at: 29 * time.Second, health: Suspect},
		"no cadence, no lease duration: dead after it":        {events: every(0, 0), lease: 5 * time.Second, at: 30 * time.Second, health: Unhealthy},
		"no cadence: the Lease's 40s duration":                {events: every(0, 0), duration: 40, lease: 5 * time.Second, at: 39 * time.Second, health: Suspect},
		"no cadence: dead after the Lease's duration":         {events: every(0, 0), duration: 40, lease: 5 * time.Second, at: 40 * time.Second, health: Unhealthy},
		"no cadence: three expected intervals when longer": {events: every(0, 0), duration: 40, expected: 15 * time.Second, lease: 5 * time.Second,
			at: 44 * time.Second, health: Suspect},
		"a measured cadence replaces the Lease's duration": {events: every(0, 10*time.Second), duration: 40, lease: 5 * time.Second,
			at: 40 * time.Second, health: Unhealthy},
		"never above the configured threshold": {events: every(0, 0), lease: time.Minute, at: 31 * time.Second, health: Unhealthy},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			th := testThresholds
			th.ExpectedRenewInterval = tc.expected
			s := runWith(th, tc.duration, tc.events...)
			lease := tc.lease
			obs := s.d.AssessWith(s.node, t0.Add(tc.at), min(lease, testThresholds.LeaseStaleAfter), testThresholds.NotReadyAfter)
			if obs.Health != tc.health {
				t.Errorf("AssessWith = %s (%s), want %s", obs.Health, obs.Evidence, tc.health)
			}
		})
	}
}

func TestNodeDeleted(t *testing.T) {
	s := run(every(0, 30*time.Second)...)
	obs := s.d.NodeDeleted("n1", t0.Add(time.Minute))
	if obs.Health != Deleted || obs.Reason != ReasonNodeDeleted || obs.BootID != "boot-1" || !obs.Unreachable() {
		t.Errorf("NodeDeleted = %+v", obs)
	}
	for _, e := range []string{"Node object deleted", "lease last renewed at", "30s before", "last boot ID boot-1"} {
		if !strings.Contains(obs.Evidence, e) {
			t.Errorf("evidence %q lacks %q", obs.Evidence, e)
		}
	}
	// Forgotten: a node of the same name starts afresh.
	if got := s.d.Assess(s.node, t0.Add(2*time.Minute)); got.Health != Healthy || !got.UnhealthyAt.IsZero() {
		t.Errorf("after deletion Assess = %+v", got)
	}
	if got := New(testThresholds).NodeDeleted("never-seen", t0); got.Health != Deleted {
		t.Errorf("unknown node: %+v", got)
	}
}

func TestPodCondition(t *testing.T) {
	since := t0.Add(-time.Minute)
	tests := map[string]struct {
		obs    Observation
		status corev1.ConditionStatus
		reason string
	}{
		"unhealthy":                  {obs: Observation{Node: "n1", Health: Unhealthy, Damping: Damping{Undamped: Unhealthy}, Reason: ReasonLeaseStale, Since: since}, status: corev1.ConditionTrue, reason: ReasonLeaseStale},
		"flapping and dead":          {obs: Observation{Node: "n1", Health: Flapping, Damping: Damping{Undamped: Unhealthy}, Reason: ReasonFlapping, Since: since}, status: corev1.ConditionTrue, reason: ReasonFlapping},
		"flapping, up at the moment": {obs: Observation{Node: "n1", Health: Flapping, Damping: Damping{Undamped: Healthy}, Reason: ReasonFlapping}, status: corev1.ConditionFalse, reason: ReasonNodeReachable},
		"deleted":                    {obs: Observation{Node: "n1", Health: Deleted, Damping: Damping{Undamped: Deleted}, Reason: ReasonNodeDeleted, Since: since}, status: corev1.ConditionTrue, reason: ReasonNodeDeleted},
		"suspect":                    {obs: Observation{Node: "n1", Health: Suspect, Damping: Damping{Undamped: Suspect}, Reason: ReasonLeaseStale}, status: corev1.ConditionFalse, reason: ReasonNodeReachable},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := PodCondition(tc.obs, t0)
			if c.Type != PodConditionNodeUnreachable || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, "n1") {
				t.Errorf("PodCondition = %+v", c)
			}
		})
	}
}

func TestSetPodCondition(t *testing.T) {
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
	down := PodCondition(Observation{Node: "n1", Health: Unhealthy, Damping: Damping{Undamped: Unhealthy}, Reason: ReasonLeaseStale, Since: t0}, t0)
	later := PodCondition(Observation{Node: "n1", Health: Unhealthy, Damping: Damping{Undamped: Unhealthy}, Reason: ReasonLeaseStale, Since: t0}, t0.Add(time.Minute))
	up := PodCondition(Observation{Node: "n1", Health: Healthy, Damping: Damping{Undamped: Healthy}}, t0.Add(2*time.Minute))

	conds, changed := SetPodCondition([]corev1.PodCondition{ready}, up)
	if changed || len(conds) != 1 {
		t.Errorf("a False condition was added to a pod without one: %+v", conds)
	}
	orig := []corev1.PodCondition{ready}
	conds, changed = SetPodCondition(orig, down)
	if !changed || len(conds) != 2 || len(orig) != 1 {
		t.Fatalf("adding: changed %v, %+v (input %+v)", changed, conds, orig)
	}
	if again, changed := SetPodCondition(conds, later); changed || !again[1].LastTransitionTime.Equal(&metav1.Time{Time: t0}) {
		t.Errorf("the same condition a minute later: changed %v, %+v", changed, again[1])
	}
	conds, changed = SetPodCondition(conds, up)
	if !changed || conds[1].Status != corev1.ConditionFalse || !conds[1].LastTransitionTime.Time.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("recovery: changed %v, %+v", changed, conds[1])
	}
}
