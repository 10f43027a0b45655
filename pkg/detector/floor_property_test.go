package detector_test

import (
	"math/rand/v2"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/policy"
)

// floorCase is one generated world: a kubelet renewing on its own jittered cadence, seen
// through a delayed watch by a controller that starts (or takes over) at a random moment,
// with random thresholds, minWait and workloads.
type floorCase struct {
	cadence, jitter, delay time.Duration
	skew                   time.Duration
	duration               int32
	th                     detector.Thresholds
	pol                    v1alpha1.Policy
	node                   policy.Node
	start, restart         time.Duration
	deathAfter             int // renewals before the kubelet dies; -1 never
}

func genFloorCase(rng *rand.Rand) floorCase {
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	c := floorCase{cadence: dur(500*time.Millisecond, 15*time.Second)}
	c.jitter = time.Duration(rng.Int64N(int64(c.cadence / 4)))
	c.delay = time.Duration(rng.Int64N(int64(c.cadence / 4)))
	c.skew = dur(-time.Hour, time.Hour)
	// The kubelet renews every quarter of its Lease's duration.
	c.duration = int32((4*c.cadence + time.Second - 1) / time.Second)
	c.th = detector.Thresholds{LeaseStaleAfter: dur(100*time.Millisecond, time.Minute), NotReadyAfter: dur(100*time.Millisecond, time.Minute)}
	if rng.IntN(3) == 0 {
		c.th.ExpectedRenewInterval = dur(0, 20*time.Second)
	}
	on, off := true, false
	c.pol = v1alpha1.Policy{Name: "p", MinWait: metav1.Duration{Duration: dur(0, 10*time.Second)},
		HonorDisruptionBudgets: &on, HonorTolerations: &on}
	if rng.IntN(4) == 0 {
		c.pol.HonorDisruptionBudgets = &off
	}
	c.node = policy.Node{Name: "n", Workload: policy.Workload{Urgent: rng.IntN(2) == 0}}
	if rng.IntN(2) == 0 {
		tol := dur(0, time.Minute)
		c.node.Workload.MinUnreachableToleration = &tol
	}
	c.start = dur(0, 20*c.cadence)
	c.restart = -1
	if rng.IntN(2) == 0 {
		c.restart = c.start + dur(0, 10*c.cadence)
	}
	c.deathAfter = -1
	if rng.IntN(4) == 0 {
		c.deathAfter = rng.IntN(40)
	}
	return c
}

// TestFloorProperty: over 10,000 generated worlds, a node whose kubelet renews within its
// cadence is never Unhealthy, however short the configured threshold, minWait or its
// pods' tolerations, and wherever the controller starts or takes over; and a kubelet
// that stops is found Unhealthy no later than the evidence floor (or the threshold, if
// longer) after its last renewal was seen, so the floor is not kept by never deciding.
func TestFloorProperty(t *testing.T) {
	const cases = 10000
	rng := rand.New(rand.NewPCG(17, 2026))
	for i := range cases {
		c := genFloorCase(rng)
		if msg := c.check(rng); msg != "" {
			t.Fatalf("case %d %+v: %s", i, c, msg)
		}
	}
}

func (c floorCase) check(rng *rand.Rand) string {
	t0 := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	d := detector.New(c.th)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	th := policy.Threshold(&c.pol, c.node, c.th.LeaseStaleAfter)
	readyTh := policy.Threshold(&c.pol, c.node, c.th.NotReadyAfter)
	assess := func(now time.Time) detector.Observation { return d.AssessWith(node, now, th, readyTh) }

	renew, seen := time.Duration(0), time.Duration(0)
	var lastSeen time.Duration = -1
	restarted := c.restart < 0
	for k := 0; c.deathAfter < 0 || k <= c.deathAfter; k++ {
		if k > 0 {
			renew += c.cadence + time.Duration(rng.Int64N(int64(2*c.jitter)+1)) - c.jitter
		}
		seen = renew + time.Duration(rng.Int64N(int64(c.delay)+1))
		if seen > c.start+40*c.cadence {
			break
		}
		// Between two sightings, look at the node a few times.
		for range 3 {
			at := lastSeen + time.Duration(rng.Int64N(int64(seen-lastSeen)+1))
			if at < c.start || lastSeen < 0 {
				continue
			}
			if !restarted && at >= c.restart {
				d.RestartClocks(t0.Add(c.restart))
				restarted = true
			}
			if obs := assess(t0.Add(at)); obs.Health == detector.Unhealthy || obs.Damping.Undamped == detector.Unhealthy {
				return "live node judged Unhealthy at +" + at.String() + ": " + obs.Evidence
			}
		}
		if seen < c.start {
			continue
		}
		if lastSeen < 0 {
			// The controller's informer lists the Lease as it is when it starts.
			d.ObserveLease(c.lease(t0, renew), t0.Add(c.start))
			lastSeen = c.start
			continue
		}
		d.ObserveLease(c.lease(t0, renew), t0.Add(seen))
		lastSeen = seen
	}
	if c.deathAfter < 0 || lastSeen < 0 {
		return ""
	}
	if !restarted {
		d.RestartClocks(t0.Add(c.restart))
		lastSeen = max(lastSeen, c.restart)
	}
	deadline := lastSeen + max(th, d.Floor("n"))
	if obs := assess(t0.Add(deadline)); obs.Damping.Undamped != detector.Unhealthy {
		return "dead node not Unhealthy at +" + deadline.String() + ": " + string(obs.Damping.Undamped) + ": " + obs.Evidence
	}
	return ""
}

func (c floorCase) lease(t0 time.Time, renew time.Duration) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(t0.Add(renew + c.skew))
	duration := c.duration
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n"},
		Spec: coordinationv1.LeaseSpec{RenewTime: &rt, LeaseDurationSeconds: &duration}}
}
