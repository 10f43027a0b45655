package detector

import (
	"slices"
	"time"
)

// The heartbeat evidence (Thresholds.Heartbeats): a node whose agent is gone from its
// peers, whose kubelet, heard before, does not answer, and whose Lease has been silent for
// the heartbeat floor (assess.go's heartbeatSignal).

// MinHeartbeatFloor bounds HeartbeatFloor from below.
const MinHeartbeatFloor = time.Second

// KubeletReprobe is how old a kubelet probe may be and still count: a failed one older
// than that is asked again (Observation.ProbeKubelet) before it makes a node unhealthy,
// and so is an answered one while the agent is still gone.
const KubeletReprobe = 2 * time.Second

// HeartbeatFloor is the shortest Lease silence on which heartbeat evidence can make node
// unhealthy: one and a half of its longest recent renewal gaps, as this process measured
// them on the kubelet's own clock, and at least MinHeartbeatFloor. Zero before a cadence
// is measured: then only the Lease floor (Floor) applies. A live kubelet late with one
// renewal stays within it only by its lateness; the agent gone and the kubelet not
// answering must come with it.
func (d *Detector) HeartbeatFloor(node string) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return heartbeatFloor(d.state(node))
}

func heartbeatFloor(st *nodeState) time.Duration {
	if len(st.lease.gaps) == 0 {
		return 0
	}
	return max(MinHeartbeatFloor, slices.Max(st.lease.gaps)*3/2)
}

// Measured is how many nodes have a measured renewal cadence, so that heartbeat
// evidence can act on them (HeartbeatFloor is not zero).
func (d *Detector) Measured() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, st := range d.nodes {
		if len(st.lease.gaps) > 0 {
			n++
		}
	}
	return n
}

// ObserveAgent records whether node's agent is gone from its peers, and since when; a
// change of either counts from scratch.
func (d *Detector) ObserveAgent(node string, since time.Time, gone bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.state(node)
	if !gone {
		since = time.Time{}
	}
	st.heartbeat.agentGone = since
}

// ObserveKubeletProbe records a probe of node's kubelet begun at started, and whether
// the kubelet answered.
func (d *Detector) ObserveKubeletProbe(node string, started time.Time, answered bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.state(node)
	if started.Before(st.heartbeat.probed) {
		return // an older probe that finished late
	}
	st.heartbeat.probed, st.heartbeat.answered = started, answered
	if answered {
		st.heartbeat.kubeletAnswered = started
	}
}

// ObserveKubeletCheck records a routine probe of node's kubelet begun at started, made
// whatever its agent does: an answer makes the kubelet's later silence count as
// evidence; no answer while the agent is among its peers makes it count for nothing
// until the kubelet answers again. A check while the agent is gone says nothing more than
// the probes the detector asks for (ProbeKubelet). It reports whether this check made a
// kubelet heard before count for nothing.
func (d *Detector) ObserveKubeletCheck(node string, started time.Time, answered bool) (discounted bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.state(node)
	switch {
	case answered && started.After(st.heartbeat.kubeletAnswered):
		st.heartbeat.kubeletAnswered = started
	case !answered && st.heartbeat.agentGone.IsZero() && started.After(st.heartbeat.kubeletAnswered):
		discounted = !st.heartbeat.kubeletAnswered.IsZero()
		st.heartbeat.kubeletAnswered = time.Time{}
	}
	return discounted
}

// KubeletAnswered is when this process last had an answer from node's kubelet; zero if
// never, or not since it went silent while the node's agent was among its peers.
func (d *Detector) KubeletAnswered(node string) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state(node).heartbeat.kubeletAnswered
}

// heartbeatFrom is when a kubelet probe must have begun to count: after the agent went
// and after the last renewal seen.
func heartbeatFrom(st *nodeState) time.Time {
	if st.lease.observedAt.After(st.heartbeat.agentGone) {
		return st.lease.observedAt
	}
	return st.heartbeat.agentGone
}

// needsProbe says whether the heartbeat evidence waits on a kubelet probe.
func (d *Detector) needsProbe(st *nodeState, now time.Time) bool {
	if !d.th.Heartbeats || st.heartbeat.agentGone.IsZero() || st.lease.observedAt.IsZero() || heartbeatFloor(st) == 0 || st.heartbeat.kubeletAnswered.IsZero() {
		return false
	}
	return st.heartbeat.probed.Before(heartbeatFrom(st)) || now.Sub(st.heartbeat.probed) >= KubeletReprobe
}
