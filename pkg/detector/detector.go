package detector

import (
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
)

// Health is a node's assessed state.
type Health string

const (
	Healthy Health = "Healthy"
	// Suspect: some evidence is bad but not for long enough yet.
	Suspect Health = "Suspect"
	// Unhealthy: the evidence has been bad for longer than its threshold.
	Unhealthy Health = "Unhealthy"
)

// Thresholds say how long evidence must be bad before a node is unhealthy.
type Thresholds struct {
	LeaseStaleAfter time.Duration
	NotReadyAfter   time.Duration
}

// Observation is the detector's verdict on one node at one time.
type Observation struct {
	Node   string
	Health Health
	// Since is when the bad evidence started (zero when healthy).
	Since time.Time
	// UnhealthyAt is when a suspect node turns unhealthy if nothing changes.
	UnhealthyAt time.Time
	// BootID is the node's boot ID as the kubelet last reported it.
	BootID   string
	Evidence string
}

// leaseSeen is when this process last saw a node's Lease renewed.
type leaseSeen struct {
	renewTime  time.Time
	observedAt time.Time
}

// Detector keeps what it has seen of node Leases. It is safe for concurrent use.
type Detector struct {
	th Thresholds
	mu sync.Mutex
	// seen is keyed by node name (the Lease's name in kube-node-lease).
	seen map[string]leaseSeen
}

// New returns a detector with the given thresholds.
func New(th Thresholds) *Detector {
	return &Detector{th: th, seen: map[string]leaseSeen{}}
}

// ObserveLease records a Lease as seen at now. Only a changed renewTime counts as a
// renewal; the first sighting counts as one, which gives a node the full threshold after
// the controller starts.
func (d *Detector) ObserveLease(lease *coordinationv1.Lease, now time.Time) {
	if lease == nil || lease.Spec.RenewTime == nil {
		return
	}
	renew := lease.Spec.RenewTime.Time
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.seen[lease.Name]; ok && s.renewTime.Equal(renew) {
		return
	}
	d.seen[lease.Name] = leaseSeen{renewTime: renew, observedAt: now}
}

// Forget drops what is known of a node's Lease.
func (d *Detector) Forget(node string) {
	d.mu.Lock()
	delete(d.seen, node)
	d.mu.Unlock()
}

// Assess returns the node's health at now from its Ready condition and its Lease.
func (d *Detector) Assess(node *corev1.Node, now time.Time) Observation {
	d.mu.Lock()
	seen, hasLease := d.seen[node.Name]
	d.mu.Unlock()
	obs := Observation{Node: node.Name, Health: Healthy, BootID: node.Status.NodeInfo.BootID}

	var signals []signal
	if hasLease {
		signals = append(signals, signal{
			bad:   now.Sub(seen.observedAt) > 0,
			since: seen.observedAt,
			after: d.th.LeaseStaleAfter,
			what: fmt.Sprintf("lease last renewed at %s (seen %s ago)",
				seen.renewTime.UTC().Format(time.RFC3339Nano), now.Sub(seen.observedAt).Round(time.Millisecond)),
		})
	}
	if c := readyCondition(node); c != nil && c.Status != corev1.ConditionTrue {
		signals = append(signals, signal{
			bad: true, since: c.LastTransitionTime.Time, after: d.th.NotReadyAfter,
			what: fmt.Sprintf("Ready=%s since %s (%s)", c.Status, c.LastTransitionTime.UTC().Format(time.RFC3339), c.Reason),
		})
	}
	for _, s := range signals {
		at := s.since.Add(s.after)
		if s.bad && (obs.UnhealthyAt.IsZero() || at.Before(obs.UnhealthyAt)) {
			obs.UnhealthyAt, obs.Since, obs.Evidence = at, s.since, s.what
		}
	}
	switch {
	case obs.UnhealthyAt.IsZero():
	case !now.Before(obs.UnhealthyAt):
		obs.Health = Unhealthy
	case readyCondition(node) != nil && readyCondition(node).Status != corev1.ConditionTrue:
		obs.Health = Suspect
	default:
		// A Lease renewed a moment ago is not suspicious; it is merely waiting for the next
		// renewal. The node stays Healthy with UnhealthyAt telling when to look again.
	}
	return obs
}

type signal struct {
	bad   bool
	since time.Time
	after time.Duration
	what  string
}

func readyCondition(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}
