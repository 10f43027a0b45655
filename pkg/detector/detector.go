package detector

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
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
	// Flapping: the node's health went bad and came back FlapThreshold times within
	// FlapWindow. It is not reported Unhealthy, whatever its evidence says now, until
	// the oldest of those recoveries leaves the window.
	Flapping Health = "Flapping"
	// Deleted: the Node object is gone, which says nothing certain about the machine.
	Deleted Health = "Deleted"
)

// Reasons, stable for metrics labels, events and pod conditions.
const (
	ReasonHealthy     = "Healthy"
	ReasonLeaseStale  = "LeaseStale"
	ReasonNotReady    = "NotReady"
	ReasonFlapping    = "Flapping"
	ReasonNodeDeleted = "NodeDeleted"
	// ReasonHeartbeatLost: the node's agent is gone from its peers, its kubelet does not
	// answer, and its Lease has been silent for the heartbeat floor (see HeartbeatFloor).
	ReasonHeartbeatLost = "HeartbeatLost"
)

// Thresholds say how long evidence must be bad before a node is unhealthy, and when a
// node is flapping.
type Thresholds struct {
	LeaseStaleAfter time.Duration
	NotReadyAfter   time.Duration
	// ExpectedRenewInterval is how often kubelets are expected to renew their Lease; zero
	// when unknown. Three of them bound the evidence floor from below for a node whose
	// cadence this process has not measured yet (see Floor).
	ExpectedRenewInterval time.Duration
	// FlapWindow and FlapThreshold: FlapThreshold recoveries within FlapWindow make a node
	// Flapping. A zero FlapThreshold turns damping off.
	FlapWindow    time.Duration
	FlapThreshold int
	// Heartbeats turns on the heartbeat evidence (ObserveAgent, ObserveKubeletProbe).
	Heartbeats bool
}

// Observation is the detector's verdict on one node at one time.
type Observation struct {
	Node   string
	Health Health
	// Damping is what flap damping saw and replaced.
	Damping Damping
	// Reason is one of the Reason constants: the evidence that decided Health.
	Reason string
	// Since is when the bad evidence started (for the Lease, the last renewal seen).
	Since time.Time
	// UnhealthyAt is when the node turns unhealthy if nothing changes; zero when no
	// evidence is bad.
	UnhealthyAt time.Time
	// BootID is the node's boot ID as the kubelet last reported it.
	BootID string
	// Reboot is the last change of BootID the detector saw.
	Reboot   Reboot
	Evidence string
	// Kubelet is what this process saw the node's kubelet write while it watched.
	Kubelet KubeletSeen
	// Floor is the evidence floor the Lease threshold was held to (see Detector.Floor).
	Floor time.Duration
	// ProbeKubelet asks for a probe of the node's kubelet (ObserveKubeletProbe): its agent
	// is gone, and no probe begun since then and since its last renewal has failed, nor
	// has one answered lately.
	ProbeKubelet bool
}

// KubeletSeen is what this process saw a node's kubelet write: its Lease renewals and
// its Ready heartbeats.
type KubeletSeen struct {
	// RenewalSeen is when this process last saw the node's Lease renewTime change: a
	// kubelet that renewed while we watched. Zero until a change is seen; the first
	// sighting of a Lease and RestartClocks do not set it.
	RenewalSeen time.Time
	// RenewTime is the Lease's renewTime as last seen (the kubelet's clock); zero without
	// a Lease. Only compared with other renewTimes of the same Lease.
	RenewTime time.Time
	// StatusSeen is when this process last saw the node's Ready heartbeat change: a
	// status the kubelet posted while we watched, which carries Observation.BootID with
	// it. Zero until a change is seen; the first sighting does not set it.
	StatusSeen time.Time
}

// Damping is what flap damping saw of a node.
type Damping struct {
	// Undamped is the health flap damping replaced: what a Flapping node's evidence says.
	// It equals Observation.Health otherwise.
	Undamped Health
	// Flaps is how many recoveries (bad evidence gone good) fell within FlapWindow,
	// counted up to FlapThreshold.
	Flaps int
}

// Reboot is a change of a node's boot ID.
type Reboot struct {
	// Recent is true when the boot ID changed within FlapWindow (or at any time since the
	// detector first saw the node, without a window): the node rebooted.
	Recent bool
	// PreviousBootID is the boot ID before the change; At is when the change was seen.
	PreviousBootID string
	At             time.Time
}

// Detector keeps what it has seen of nodes and their Leases. It is safe for concurrent
// use.
type Detector struct {
	th Thresholds
	mu sync.Mutex
	// nodes is keyed by node name (also the Lease's name in kube-node-lease).
	nodes map[string]*nodeState
}

// New returns a detector with the given thresholds.
func New(th Thresholds) *Detector {
	return &Detector{th: th, nodes: map[string]*nodeState{}}
}

func (d *Detector) state(node string) *nodeState {
	st, ok := d.nodes[node]
	if !ok {
		st = &nodeState{}
		d.nodes[node] = st
	}
	return st
}

// ObserveLease records a Lease as seen at now. Only a changed renewTime counts as a
// renewal; the first sighting starts the staleness clock but measures no cadence. A
// renewal after a gap of more than half the Lease threshold (or the evidence floor, if
// longer) is a recovery from a lapse, and counts as a flap.
func (d *Detector) ObserveLease(lease *coordinationv1.Lease, now time.Time) {
	if lease == nil || lease.Spec.RenewTime == nil {
		return
	}
	renew := lease.Spec.RenewTime.Time
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.state(lease.Name)
	if s := lease.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		st.lease.duration = time.Duration(*s) * time.Second
	}
	if !st.lease.observedAt.IsZero() {
		if st.lease.renewTime.Equal(renew) {
			return
		}
		if gap := now.Sub(st.lease.observedAt); gap > max(d.th.LeaseStaleAfter, d.floor(st))/2 {
			d.recordFlap(st, now)
			st.lastLeaseFlap = now
		} else if step := renew.Sub(st.lease.renewTime); step > 0 {
			st.lease.gaps = append(st.lease.gaps, step)
			if extra := len(st.lease.gaps) - cadenceSamples; extra > 0 {
				st.lease.gaps = append(st.lease.gaps[:0], st.lease.gaps[extra:]...)
			}
		}
		st.lease.renewalSeen = now
	}
	st.lease.renewTime, st.lease.observedAt = renew, now
}

// cadenceSamples is how many renewal gaps make up a node's measured cadence.
const cadenceSamples = 3

// floorMultiple is how many renewal periods a Lease may go unrenewed before a node can
// be judged dead on it: a live kubelet can be late with one renewal (an API request that
// timed out and was retried), but not with three.
const floorMultiple = 3

// Floor is the shortest Lease silence on which node may be judged dead, whatever the
// configured or workload-shortened threshold (safety invariant 10):
//   - with a measured cadence, three of the node's longest recent renewal gaps;
//   - otherwise the Lease's leaseDurationSeconds (the kubelet's own promise), or three
//     ExpectedRenewIntervals if that is longer;
//   - with neither, the configured LeaseStaleAfter.
//
// Staleness itself counts from when this process saw the renewTime last change, or first
// saw the Lease, or took over leadership: so a fresh leader judges nothing about a node
// before it has watched its Lease for at least one floor.
func (d *Detector) Floor(node string) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.floor(d.state(node))
}

func (d *Detector) floor(st *nodeState) time.Duration {
	if len(st.lease.gaps) > 0 {
		return floorMultiple * slices.Max(st.lease.gaps)
	}
	f := max(st.lease.duration, floorMultiple*d.th.ExpectedRenewInterval)
	if f == 0 {
		return d.th.LeaseStaleAfter
	}
	return f
}

// recordFlap notes a recovery at now, keeping only the latest FlapThreshold.
func (d *Detector) recordFlap(st *nodeState, now time.Time) {
	if d.th.FlapThreshold <= 0 {
		return
	}
	st.flaps = append(st.flaps, now)
	if extra := len(st.flaps) - d.th.FlapThreshold; extra > 0 {
		st.flaps = append(st.flaps[:0], st.flaps[extra:]...)
	}
}

// RestartClocks makes every node's Lease staleness count from now, as if each had just
// renewed. A replica calls it when it becomes leader: leadership changes hands when the
// API server was out of reach, and then no kubelet could renew either. Staleness measured
// across that blackout is the control plane's failure, not the nodes'; counting it would
// open an incident for every node at once.
func (d *Detector) RestartClocks(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, st := range d.nodes {
		if !st.lease.observedAt.IsZero() && st.lease.observedAt.Before(now) {
			st.lease.observedAt = now
		}
	}
}

// Forget drops what is known of a node.
func (d *Detector) Forget(node string) {
	d.mu.Lock()
	delete(d.nodes, node)
	d.mu.Unlock()
}

// NodeDeleted reports a deleted Node object with what was last known of it, and forgets
// the node. The controller decides what deletion means; the detector only tells it.
func (d *Detector) NodeDeleted(node string, now time.Time) Observation {
	d.mu.Lock()
	st, known := d.nodes[node]
	delete(d.nodes, node)
	d.mu.Unlock()
	obs := Observation{Node: node, Health: Deleted, Damping: Damping{Undamped: Deleted}, Reason: ReasonNodeDeleted, Since: now,
		Evidence: fmt.Sprintf("Node object deleted (seen at %s)", now.UTC().Format(time.RFC3339))}
	if known {
		obs.BootID = st.boot.id
		if !st.lease.observedAt.IsZero() {
			obs.Evidence += fmt.Sprintf("; lease last renewed at %s (seen %s before)",
				st.lease.renewTime.UTC().Format(time.RFC3339Nano), now.Sub(st.lease.observedAt).Round(time.Millisecond))
		}
		if st.boot.id != "" {
			obs.Evidence += "; last boot ID " + st.boot.id
		}
	}
	return obs
}

// Assess returns the node's health at now from its Ready condition and its Lease, with
// the configured thresholds.
func (d *Detector) Assess(node *corev1.Node, now time.Time) Observation {
	return d.AssessWith(node, now, d.th.LeaseStaleAfter, d.th.NotReadyAfter)
}

// AssessWith is Assess with the node's own thresholds, as policy.Threshold changes them
// for its workloads. Neither threshold is ever taken below the evidence floor (see
// Floor): the Lease threshold is at least the floor, and Ready=False or Unknown makes a
// node unhealthy only once its Lease, if it has one, has also been silent for the floor.
// A kubelet that renews on its own cadence is alive, whatever the Ready condition says.
func (d *Detector) AssessWith(node *corev1.Node, now time.Time, leaseStaleAfter, notReadyAfter time.Duration) Observation {
	return d.assessWith(node, now, leaseStaleAfter, notReadyAfter, true)
}

// SurveyWith is AssessWith without the evidence in words: the same observation and the
// same record of the node, with Evidence empty. A survey of every node that reads only
// the health and its times (the budget's view of the cluster, at each decision) does not
// format one sentence per node.
func (d *Detector) SurveyWith(node *corev1.Node, now time.Time, leaseStaleAfter, notReadyAfter time.Duration) Observation {
	return d.assessWith(node, now, leaseStaleAfter, notReadyAfter, false)
}

func (d *Detector) assessWith(node *corev1.Node, now time.Time, leaseStaleAfter, notReadyAfter time.Duration, evidence bool) Observation {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.state(node.Name)
	ready := readyCondition(node)
	d.observeNode(st, node, ready, now)
	floor := d.floor(st)
	obs := assess(st, node.Name, ready, now, max(leaseStaleAfter, floor), notReadyAfter, floor, d.th.Heartbeats, evidence)
	obs.ProbeKubelet = d.needsProbe(st, now)
	d.damp(st, &obs, now, evidence)
	d.boot(st, &obs, now, evidence)
	return obs
}

// Fresh reports whether AssessWith(node, now, a, b) would find the node Healthy, not
// Suspect or Flapping, and record nothing new, for every pair of thresholds: its Lease
// was seen renewed within half its evidence floor (which every Lease threshold is at
// least, and a Lease is suspect only past half its threshold), it is Ready as it was when
// last assessed, with the same heartbeat and boot ID, and it is not flapping. A survey
// of the whole cluster asks this first and takes the full assessment, with the node's
// own thresholds, only of the nodes that are not fresh. A node whose agent is gone from
// its peers is never fresh.
func (d *Detector) Fresh(node *corev1.Node, now time.Time) bool {
	ready := readyCondition(node)
	if ready == nil || ready.Status != corev1.ConditionTrue {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.nodes[node.Name]
	if !ok || st.lease.observedAt.IsZero() || !st.heartbeat.agentGone.IsZero() || !st.ready.known || st.ready.bad || !ready.LastHeartbeatTime.Time.Equal(st.ready.heartbeat) {
		return false
	}
	if b := node.Status.NodeInfo.BootID; b != "" && b != st.boot.id {
		return false
	}
	floor := d.floor(st)
	return floor > 0 && now.Sub(st.lease.observedAt) <= floor/2 && len(d.recentFlaps(st, now)) < max(d.th.FlapThreshold, 1)
}

// observeNode records Ready recoveries and boot ID changes from the Node object.
func (d *Detector) observeNode(st *nodeState, node *corev1.Node, ready *corev1.NodeCondition, now time.Time) {
	bad := ready != nil && ready.Status != corev1.ConditionTrue
	// A Ready recovery close after a Lease recovery is the same episode seen twice.
	if st.ready.known && st.ready.bad && !bad && now.Sub(st.lastLeaseFlap) > d.th.LeaseStaleAfter {
		d.recordFlap(st, now)
	}
	st.ready.known, st.ready.bad = ready != nil, bad
	if ready != nil {
		if hb := ready.LastHeartbeatTime.Time; !hb.Equal(st.ready.heartbeat) {
			if !st.ready.heartbeat.IsZero() {
				st.ready.statusSeen = now
			}
			st.ready.heartbeat = hb
		}
	}
	if b := node.Status.NodeInfo.BootID; b != "" {
		if st.boot.id != "" && b != st.boot.id {
			st.boot.prev, st.boot.changedAt = st.boot.id, now
		}
		st.boot.id = b
	}
}

// LastLife is when this process last saw node's kubelet at work: its Lease renewTime, its
// Ready heartbeat change, or the start of a probe it answered (heartbeats). Zero if none
// was seen. A watchdog fence or an off read that life after it contradicts is never
// counted (selffence, devicemonitor).
func (d *Detector) LastLife(node string) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.nodes[node]
	if !ok {
		return time.Time{}
	}
	last := st.lease.renewalSeen
	for _, t := range []time.Time{st.ready.statusSeen, st.heartbeat.kubeletAnswered} {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// ForConfig is a detector with cfg's detection timings.
func ForConfig(cfg *v1alpha1.Config) *Detector {
	return New(Thresholds{
		LeaseStaleAfter:       cfg.Detection.LeaseStaleAfter.Duration,
		NotReadyAfter:         cfg.Detection.NotReadyAfter.Duration,
		ExpectedRenewInterval: cfg.Detection.ExpectedRenewInterval.Duration,
		FlapWindow:            cfg.Detection.FlapWindow.Duration,
		FlapThreshold:         int(cfg.Detection.FlapThreshold),
		Heartbeats:            cfg.Heartbeats != nil,
	})
}
