package detector

import "time"

// nodeState is what the detector remembers of one node between events.
type nodeState struct {
	lease leaseState
	// flaps are the latest recoveries, oldest first, at most FlapThreshold of them.
	flaps         []time.Time
	lastLeaseFlap time.Time
	ready         readyState
	boot          bootState
	heartbeat     heartbeatState
}

// leaseState is what the detector saw of a node's Lease.
type leaseState struct {
	// renewTime is the Lease's last renewTime; observedAt is when this process saw it
	// change. A zero observedAt means no Lease seen yet.
	renewTime  time.Time
	observedAt time.Time
	// renewalSeen is when a change of renewTime was last seen (observedAt, before any
	// RestartClocks moved it on).
	renewalSeen time.Time
	// gaps are the latest differences between consecutive renewTimes that were not a
	// lapse, newest last, at most cadenceSamples of them: the node's own renewal cadence,
	// measured on its own clock so that neither clock skew nor when this process first
	// saw the Lease shortens it.
	gaps []time.Duration
	// duration is the Lease's leaseDurationSeconds: how long its holder promises a
	// renewal lasts. Zero when the Lease does not say.
	duration time.Duration
}

// readyState is what the detector saw of a node's Ready condition.
type readyState struct {
	// known is true once a Ready condition was seen; bad while it is not True.
	known bool
	bad   bool
	// heartbeat is the Ready condition's lastHeartbeatTime as last seen; statusSeen is
	// when this process saw it change.
	heartbeat  time.Time
	statusSeen time.Time
}

// bootState is the node's boot ID, and the one before it with when it changed.
type bootState struct {
	id        string
	prev      string
	changedAt time.Time
}

// heartbeatState is what the heartbeat evidence (heartbeat.go) knows of a node.
type heartbeatState struct {
	// agentGone is when the node's agent was learned gone from its peers; zero while it
	// is a member (or was never seen).
	agentGone time.Time
	// probed is when the last probe of the kubelet began, and answered whether it got an
	// answer.
	probed   time.Time
	answered bool
	// kubeletAnswered is when a probe of the kubelet last got an answer, reset by a
	// routine check that got none while the node's agent was among its peers: a kubelet
	// whose silence means nothing (a firewalled port) gives no heartbeat evidence.
	kubeletAnswered time.Time
}
