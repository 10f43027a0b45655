package detector

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// signal is one piece of evidence and how long it may be bad.
type signal struct {
	bad bool
	// suspect is true once the evidence is bad enough to doubt the node.
	suspect bool
	since   time.Time
	after   time.Duration
	reason  string
	// what says the evidence in words, written only when asked for (assess's evidence).
	what func() string
}

// assess turns the evidence into a health, ignoring flaps; with evidence, it says why in
// Observation.Evidence, and without, it leaves Evidence empty and everything else the same.
func assess(st *nodeState, name string, ready *corev1.NodeCondition, now time.Time, leaseAfter, readyAfter, floor time.Duration, heartbeats, evidence bool) Observation {
	obs := Observation{Node: name, Health: Healthy, Damping: Damping{Undamped: Healthy}, Reason: ReasonHealthy, BootID: st.boot.id,
		Kubelet: KubeletSeen{RenewalSeen: st.lease.renewalSeen, RenewTime: st.lease.renewTime, StatusSeen: st.ready.statusSeen}, Floor: floor}
	var signals []signal
	if !st.lease.observedAt.IsZero() {
		// The Lease's clock always runs: a renewal only restarts it.
		stale := now.Sub(st.lease.observedAt)
		signals = append(signals, signal{
			bad: true, suspect: stale > leaseAfter/2, since: st.lease.observedAt, after: leaseAfter, reason: ReasonLeaseStale,
			what: func() string {
				return fmt.Sprintf("lease last renewed at %s (seen %s ago, threshold %s, evidence floor %s)",
					st.lease.renewTime.UTC().Format(time.RFC3339Nano), stale.Round(time.Millisecond), leaseAfter, floor)
			},
		})
	}
	if s, ok := heartbeatSignal(st, now, heartbeats); ok {
		signals = append(signals, s)
	}
	if ready != nil && ready.Status != corev1.ConditionTrue {
		after := readyAfter
		if !st.lease.observedAt.IsZero() {
			// A Lease still renewing vetoes NotReady until it too has been silent for the
			// floor.
			after = max(after, st.lease.observedAt.Add(floor).Sub(ready.LastTransitionTime.Time))
		}
		signals = append(signals, signal{
			bad: true, suspect: true, since: ready.LastTransitionTime.Time, after: after, reason: ReasonNotReady,
			what: func() string {
				return fmt.Sprintf("Ready=%s since %s (%s, threshold %s)", ready.Status,
					ready.LastTransitionTime.UTC().Format(time.RFC3339), ready.Reason, readyAfter)
			},
		})
	}
	var winner *signal
	var doubts []*signal
	suspectReason := ""
	for i := range signals {
		s := &signals[i]
		at := s.since.Add(s.after)
		if s.bad && (obs.UnhealthyAt.IsZero() || at.Before(obs.UnhealthyAt)) {
			obs.UnhealthyAt, obs.Since, winner = at, s.since, s
		}
		if s.suspect {
			doubts = append(doubts, s)
			if suspectReason == "" {
				suspectReason = s.reason
			}
		}
	}
	// says is the evidence in words, when asked for.
	says := func(of ...*signal) string {
		if !evidence {
			return ""
		}
		words := make([]string, len(of))
		for i, s := range of {
			words[i] = s.what()
		}
		return strings.Join(words, "; ")
	}
	switch {
	case winner == nil:
		if evidence {
			obs.Evidence = "no Lease seen yet; Ready is not False or Unknown"
		}
		return obs
	case !now.Before(obs.UnhealthyAt):
		obs.Health, obs.Reason, obs.Evidence = Unhealthy, winner.reason, says(winner)
	case len(doubts) > 0:
		obs.Health, obs.Reason, obs.Evidence = Suspect, suspectReason, says(doubts...)
	default:
		// A Lease renewed a moment ago is not suspicious; it is merely waiting for the next
		// renewal. The node stays Healthy with UnhealthyAt telling when to look again.
		obs.Evidence = says(winner)
	}
	obs.Damping.Undamped = obs.Health
	return obs
}

// heartbeatSignal is the heartbeat evidence, when it is bad: the node's agent is gone from
// its peers, a probe of its kubelet begun since then, since its last renewal seen and
// within KubeletReprobe got no answer, and then, once its Lease has been silent for the
// heartbeat floor, the node is unhealthy. Without a measured cadence there is none, nor
// for a kubelet this process never had an answer from (or none since it went silent
// while the agent was there): its silence is its port's, not its death.
func heartbeatSignal(st *nodeState, now time.Time, heartbeats bool) (signal, bool) {
	hb := heartbeatFloor(st)
	if !heartbeats || hb == 0 || st.heartbeat.agentGone.IsZero() || st.lease.observedAt.IsZero() || st.heartbeat.kubeletAnswered.IsZero() {
		return signal{}, false
	}
	if st.heartbeat.answered || st.heartbeat.probed.Before(heartbeatFrom(st)) || now.Sub(st.heartbeat.probed) >= KubeletReprobe {
		return signal{}, false
	}
	at := st.lease.observedAt.Add(hb)
	if st.heartbeat.agentGone.After(at) {
		at = st.heartbeat.agentGone
	}
	return signal{
		bad: true, suspect: true, since: st.lease.observedAt, after: at.Sub(st.lease.observedAt), reason: ReasonHeartbeatLost,
		what: func() string {
			return fmt.Sprintf("agent gone from its peers since %s; kubelet gave no answer to a probe at %s; lease last renewed at %s (seen %s ago, heartbeat floor %s)",
				st.heartbeat.agentGone.UTC().Format(time.RFC3339Nano), st.heartbeat.probed.UTC().Format(time.RFC3339Nano),
				st.lease.renewTime.UTC().Format(time.RFC3339Nano), now.Sub(st.lease.observedAt).Round(time.Millisecond), hb)
		},
	}, true
}

// damp reports a node that keeps breaking and mending itself as Flapping, and says so in
// the evidence when asked for.
func (d *Detector) damp(st *nodeState, obs *Observation, now time.Time, evidence bool) {
	if d.th.FlapThreshold <= 0 {
		return
	}
	flaps := d.recentFlaps(st, now)
	obs.Damping.Flaps = len(flaps)
	if obs.Damping.Flaps < d.th.FlapThreshold {
		return
	}
	until := st.flaps[0].Add(d.th.FlapWindow)
	obs.Health, obs.Reason = Flapping, ReasonFlapping
	if evidence {
		recent := make([]string, len(flaps))
		for i, t := range flaps {
			recent[i] = t.UTC().Format(time.RFC3339)
		}
		state := "now " + strings.ToLower(string(obs.Damping.Undamped)) + ": " + obs.Evidence
		obs.Evidence = fmt.Sprintf("health recovered %d times within %s (at %s), flapping until %s; %s",
			obs.Damping.Flaps, d.th.FlapWindow, strings.Join(recent, ", "), until.UTC().Format(time.RFC3339), state)
	}
	if !obs.UnhealthyAt.IsZero() && obs.UnhealthyAt.Before(until) {
		obs.UnhealthyAt = until
	}
}

// recentFlaps are the node's recoveries within the flap window before now.
func (d *Detector) recentFlaps(st *nodeState, now time.Time) []time.Time {
	var recent []time.Time
	for _, t := range st.flaps {
		if d.th.FlapWindow <= 0 || now.Sub(t) < d.th.FlapWindow {
			recent = append(recent, t)
		}
	}
	return recent
}

// boot reports a changed boot ID, in the evidence too when asked for.
func (d *Detector) boot(st *nodeState, obs *Observation, now time.Time, evidence bool) {
	if st.boot.prev == "" {
		return
	}
	obs.Reboot.PreviousBootID, obs.Reboot.At = st.boot.prev, st.boot.changedAt
	obs.Reboot.Recent = d.th.FlapWindow <= 0 || now.Sub(st.boot.changedAt) < d.th.FlapWindow
	if obs.Reboot.Recent && evidence {
		obs.Evidence += fmt.Sprintf("; rebooted: boot ID %s, was %s until %s",
			st.boot.id, st.boot.prev, st.boot.changedAt.UTC().Format(time.RFC3339))
	}
}

// Ready reports whether node's Ready condition is True.
func Ready(node *corev1.Node) bool {
	c := readyCondition(node)
	return c != nil && c.Status == corev1.ConditionTrue
}

func readyCondition(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}
