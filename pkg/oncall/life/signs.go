package life

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// Signs are every sign that a node may be alive that whoever answers a confirm-off could
// gather: the incident loop from its live reads and its watches, explain from the API
// server. Alive judges them, for both: a person's word that a node is off is refused
// while any of them says the node may be alive (safety invariant 13). A kubelet that
// crashed leaves its node's containers, its agent and a replica on it running: its Lease
// alone would take that node for off.
type Signs struct {
	// At is when the signs were gathered; a Seen counts until its end.
	At time.Time
	// Kubelet is what a live read of the node's Lease shows of its life since the
	// incident opened (a renewal after the one the incident recorded), "" for nothing.
	Kubelet string
	// Replica is the evidence that a controller replica renews its identity Lease on the
	// node (leader.Replicas.On), "" for none.
	Replica string
	// Agent is the node agent's latest report (its report Lease; ReportSeen).
	Agent Seen
	// Probe is the kubelet's latest answer to a probe of the replicas' heartbeats.
	Probe Seen
}

// Seen is a sign seen at At that counts For after it: its stated bound, past which it is
// nothing (safety invariant 12). A zero At is no sign.
type Seen struct {
	At  time.Time
	For time.Duration
}

// fresh reports whether s still counts at now.
func (s Seen) fresh(now time.Time) bool { return !s.At.IsZero() && now.Before(s.At.Add(s.For)) }

// ago says how long before now s was seen.
func (s Seen) ago(now time.Time) string { return now.Sub(s.At).Round(time.Millisecond).String() }

// ReportSeen is the node agent's report Lease l seen at at: it counts for the
// leaseDurationSeconds the agent stated on it (three report intervals), or maxAge
// (watchdog.reportMaxAge) on a Lease that states none.
func ReportSeen(l *coordinationv1.Lease, at time.Time, maxAge time.Duration) Seen {
	s := Seen{At: at, For: maxAge}
	if d := l.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		s.For = time.Duration(*d) * time.Second
	}
	return s
}

// powerOn is v1alpha1.Attempt.PowerState for a target read back as on.
const powerOn = "on"

// Alive returns the first sign in l, or in nf's record, that nf's node may be alive,
// in words; "" when there is none. A watchdog attempt of nf that failed with the node
// read on was contradicted (the node outlived its reset): its watchdog cannot be counted
// on, and a word on this incident stays refused.
func (l Signs) Alive(nf *v1alpha1.NodeFence) string {
	switch {
	case l.Kubelet != "":
		return l.Kubelet
	case l.Replica != "":
		return "a controller replica runs on it: " + l.Replica
	case l.Agent.fresh(l.At):
		return fmt.Sprintf("its node agent reported %s ago (a report counts for %s)", l.Agent.ago(l.At), l.Agent.For)
	case l.Probe.fresh(l.At):
		return fmt.Sprintf("its kubelet answered a probe %s ago (an answer counts for %s)", l.Probe.ago(l.At), l.Probe.For)
	}
	for _, a := range nf.Status.Attempts {
		if a.Agent == v1alpha1.WatchdogAgent && a.State == v1alpha1.AttemptFailed && a.PowerState == powerOn {
			return fmt.Sprintf("its watchdog fence (level %d) was contradicted: %s; a word on this incident stays refused (once the node is silent, %s=true on a Failed incident opens a new one)",
				a.Level, a.Error, v1alpha1.RetryAnnotation)
		}
	}
	return ""
}
