package detector_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/detector"
)

// hbCase is one generated world for the heartbeat evidence: a kubelet renewing every
// cadence plus up to 4% (the kubelet's own jitter), and, for a kubelet whose port never
// answered, one renewal in five up to late (60%) of a cadence late, seen through a watch
// delayed by up to a quarter cadence;
// its agent gone from its peers at some moment (or never), and a prober whose answers
// the world chooses.
type hbCase struct {
	cadence, delay time.Duration
	late           float64
	goneAt         time.Duration // -1: the agent stays
	// probes: "fail": the kubelet answered the routine checks while its agent was there,
	// and no probe once the agent is gone; "answer": it always answers; "never": its port
	// never answered anything (firewalled).
	probes     string
	deathAfter int           // renewals before the kubelet dies; -1 never
	restart    time.Duration // when the controller takes over; -1 never
}

func genHBCase(rng *rand.Rand) hbCase {
	c := hbCase{cadence: 500*time.Millisecond + time.Duration(rng.Int64N(int64(15*time.Second))), goneAt: -1, deathAfter: -1, restart: -1}
	c.delay = time.Duration(rng.Int64N(int64(c.cadence / 4)))
	if rng.IntN(4) > 0 {
		c.goneAt = time.Duration(rng.Int64N(int64(30 * c.cadence)))
	}
	c.probes = []string{"fail", "answer", "never"}[rng.IntN(3)]
	if c.probes == "never" {
		c.late = 0.6
	}
	if rng.IntN(2) == 0 {
		c.deathAfter = 3 + rng.IntN(30)
	}
	if rng.IntN(3) == 0 {
		c.restart = time.Duration(rng.Int64N(int64(30 * c.cadence)))
	}
	return c
}

// TestHeartbeatFloorProperty: over 10,000 generated worlds, heartbeat evidence never
// makes a node with a live kubelet Unhealthy, even with its agent gone and every probe of
// its kubelet failing, nor with renewals up to 60% late from a kubelet whose port never
// answered; never makes any node Unhealthy while its agent is a member or its kubelet
// answers, or ever for a kubelet never heard; and finds a dead kubelet whose agent is
// gone Unhealthy once its Lease has been silent for the heartbeat floor, well before the
// Lease floor.
func TestHeartbeatFloorProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 2026))
	for i := range 10000 {
		c := genHBCase(rng)
		if msg := c.check(rng); msg != "" {
			t.Fatalf("case %d %+v: %s", i, c, msg)
		}
	}
}

func (c hbCase) check(rng *rand.Rand) string {
	t0 := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	// A Lease threshold far off, so that any Unhealthy comes from the heartbeat.
	d := detector.New(detector.Thresholds{LeaseStaleAfter: time.Hour, NotReadyAfter: time.Hour, Heartbeats: true})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	fc := floorCase{duration: int32((4*c.cadence + time.Second - 1) / time.Second)}
	// The routine checks while the agent was there: answered, unless the port never does.
	d.ObserveKubeletCheck("n", t0, c.probes != "never")
	look := func(at time.Duration) detector.Observation {
		now := t0.Add(at)
		d.ObserveAgent("n", t0.Add(c.goneAt), c.goneAt >= 0 && at >= c.goneAt)
		if c.restart >= 0 && at >= c.restart {
			d.RestartClocks(t0.Add(c.restart))
		}
		obs := d.AssessWith(node, now, time.Hour, time.Hour)
		if obs.ProbeKubelet {
			d.ObserveKubeletProbe("n", now, c.probes == "answer")
			obs = d.AssessWith(node, now, time.Hour, time.Hour)
		}
		return obs
	}
	renew, lastSeen := time.Duration(0), time.Duration(0)
	d.ObserveLease(fc.lease(t0, 0), t0)
	for k := 1; c.deathAfter < 0 || k <= c.deathAfter; k++ {
		late := c.cadence / 25
		if c.late > 0 && rng.IntN(5) == 0 {
			late = time.Duration(float64(c.cadence) * c.late)
		}
		renew += c.cadence + time.Duration(rng.Int64N(int64(late)+1))
		seen := renew + time.Duration(rng.Int64N(int64(c.delay)+1))
		if seen > 40*c.cadence {
			return ""
		}
		for range 4 {
			at := lastSeen + time.Duration(rng.Int64N(int64(seen-lastSeen)+1))
			if obs := look(at); obs.Damping.Undamped == detector.Unhealthy {
				return fmt.Sprintf("live kubelet judged Unhealthy at +%s: %s", at, obs.Evidence)
			}
		}
		d.ObserveLease(fc.lease(t0, renew), t0.Add(seen))
		lastSeen = seen
	}
	// The kubelet is dead: with its agent gone and probes failing, the heartbeat floor
	// after its last renewal seen (or the takeover) is as long as it may take.
	from := lastSeen
	if c.restart > from {
		from = c.restart
	}
	for step := range 200 {
		at := from + time.Duration(step)*c.cadence/20
		obs := look(at)
		agentHere := c.goneAt < 0 || at < c.goneAt
		if obs.Damping.Undamped == detector.Unhealthy && obs.Reason == detector.ReasonHeartbeatLost {
			if agentHere || c.probes != "fail" {
				return fmt.Sprintf("HeartbeatLost at +%s with the agent present, the kubelet answering or never heard: %s", at, obs.Evidence)
			}
			if silence, floor := at-from, d.HeartbeatFloor("n"); silence < floor || floor < detector.MinHeartbeatFloor {
				return fmt.Sprintf("HeartbeatLost at +%s after %s of silence, below the heartbeat floor %s", at, silence, floor)
			}
		}
		if !agentHere && c.probes == "fail" {
			deadline := max(from+d.HeartbeatFloor("n"), c.goneAt) + c.cadence/20
			if at >= deadline && obs.Damping.Undamped != detector.Unhealthy {
				return fmt.Sprintf("dead kubelet with its agent gone not Unhealthy at +%s (deadline +%s): %s", at, deadline, obs.Evidence)
			}
		}
	}
	return ""
}
