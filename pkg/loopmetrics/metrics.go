// Package loopmetrics are the incident loop's Prometheus metrics: their names, labels and
// help, which the chart's alerts and the runbooks select on.
package loopmetrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/policy"
)

// Label values of the metrics below, which alerts and dashboards select on. Phases
// (v1alpha1.Phase), hold reasons (policy.Reason*) and error kinds (plugin.ErrorKind)
// have constants of their own.
const (
	// Steps timed by kubefence_phase_duration_seconds.
	DurationDetect    = "detect"
	DurationFence     = "fence"
	DurationRemediate = "remediate"
)

// Metrics are the incident loop's Prometheus metrics.
type Metrics struct {
	Registry      *prometheus.Registry
	Incidents     *prometheus.CounterVec
	PhaseDuration *prometheus.HistogramVec
	// FailureToReleased is the figure an SLO is written on: from the failure (the bad
	// evidence the incident opened on) to the node's workloads released, per policy.
	FailureToReleased *prometheus.HistogramVec
	Unhealthy         prometheus.Gauge
	FailedNodes       prometheus.Gauge
	Holds             *prometheus.CounterVec
	Leader            prometheus.Gauge
	Identity          *prometheus.GaugeVec
	WouldFence        prometheus.Counter
	// contradictions counts nodes back with the same boot after a verified fence.
	Contradictions prometheus.Counter
	// Fenced is when each node whose incident is still open had its fence verified
	// (SetFenced).
	Fenced *prometheus.GaugeVec
	// fencedShown are the node and action pairs Fenced shows, for SetFenced to remove
	// those it no longer lists.
	fencedMu    sync.Mutex
	fencedShown map[[2]string]bool
}

// New makes the incident loop's metrics on reg (nil: a registry of their own).
func New(reg *prometheus.Registry) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		Registry: reg,
		Incidents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubefence_incidents_total",
			Help: "Incidents that entered each phase.",
		}, []string{"phase"}),
		PhaseDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kubefence_phase_duration_seconds",
			Help:    "Time spent per incident step: detect (bad evidence to incident), fence (start to verified), remediate.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}, []string{"phase"}),
		FailureToReleased: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kubefence_failure_to_released_seconds",
			Help: "From the failure (the bad evidence an incident opened on; a request's creation when it has none) to the node's workloads released, by policy.",
			// The profiles' targets (6, 12 and 35 seconds) fall on bucket bounds.
			Buckets: []float64{1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 35, 45, 60, 90, 120, 300, 600, 1800, 3600},
		}, []string{"policy"}),
		Unhealthy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubefence_nodes_unhealthy",
			Help: "Nodes the detector currently finds unhealthy, and nodes with an open incident (down until they are back); refreshed every 5s.",
		}),
		FailedNodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubefence_nodes_fence_failed",
			Help: "Nodes whose last incident failed and that get no new automatic incident until they recover or a person sets fencing.kubefence.io/retry=true on it; refreshed every 5s.",
		}),
		Holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubefence_holds_total",
			Help: "Fencing decisions held by policy, by reason.",
		}, []string{"reason"}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubefence_leader",
			Help: "1 while this replica is the leader.",
		}),
		Identity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kubefence_identity",
			Help: "Constant 1, labelled with this replica's identity.",
		}, []string{"id"}),
		WouldFence: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kubefence_would_fence_total",
			Help: "Dry-run decisions to fence (shadow mode: nothing was done).",
		}),
		Contradictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kubefence_fence_contradictions_total",
			Help: "Nodes that reported Ready with the same boot ID after a verified fence.",
		}),
		Fenced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kubefence_node_fenced_timestamp_seconds",
			Help: "When the fence of a node whose incident is still open was verified (read back off, or a person's confirm-off accepted), in Unix seconds, by the incident's action (Off, Reboot); the series goes when the incident ends. Set by the leader, refreshed every 5s.",
		}, []string{LabelNode, LabelAction}),
	}
	m.register()
	return m
}

// register adds every metric to the registry.
func (m *Metrics) register() {
	m.Registry.MustRegister(m.WouldFence, m.Contradictions, m.FailedNodes, m.Incidents, m.PhaseDuration,
		m.FailureToReleased, m.Unhealthy, m.Holds, m.Leader, m.Identity, m.Fenced)
}

// InitCounters sets every counter an alert reads to 0 for each label value known at
// start, so that the first increment is an increase Prometheus can see: a counter that
// appears at 1 has no increase, and the alert on the first failure would never fire.
func (m *Metrics) InitCounters() {
	for _, p := range []v1alpha1.Phase{v1alpha1.PhasePending, v1alpha1.PhaseHeld, v1alpha1.PhaseFencing, v1alpha1.PhaseFenced,
		v1alpha1.PhaseRemediated, v1alpha1.PhaseRecovered, v1alpha1.PhaseFailed, v1alpha1.PhaseCancelled} {
		m.Incidents.WithLabelValues(string(p))
	}
	for _, r := range []string{policy.ReasonStorm, policy.ReasonZoneDark, policy.ReasonPaused, policy.ReasonExcluded, policy.ReasonMaintenance,
		policy.ReasonNothingToRelease, policy.ReasonCooldown, policy.ReasonControlPlane, policy.ReasonMaxConcurrent,
		policy.ReasonRateLimited, policy.ReasonControllerHere, policy.ReasonTargetReadsOff, fencer.ReasonOutlived,
		v1alpha1.ReasonTargetMismatch} {
		m.Holds.WithLabelValues(r)
	}
}
