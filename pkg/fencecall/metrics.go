package fencecall

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// Metrics count agent calls: their latency and their errors by kind.
type Metrics struct {
	latency *prometheus.HistogramVec
	errors  *prometheus.CounterVec
	// mismatches count the calls whose device proved another machine's.
	mismatches *prometheus.CounterVec
}

// NewMetrics makes the agent call metrics and registers them on reg (nil: nowhere). The
// error counter starts at 0 for every agent, method and error kind an alert reads, so
// that the first failure is an increase Prometheus sees.
func NewMetrics(reg prometheus.Registerer, agents []string) *Metrics {
	m := &Metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kubefence_agent_call_duration_seconds",
			Help:    "Latency of agent calls by agent and method.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"agent", "method"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubefence_agent_errors_total",
			Help: "Failed agent calls by agent, method and error kind.",
		}, []string{"agent", "method", "kind"}),
		mismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubefence_target_mismatch_total",
			Help: "Agent calls refused because the device's own identity (system GUID, instance ID) is not the node's (systemUUID, providerID): the target mapping names another machine.",
		}, []string{"agent"}),
	}
	kinds := []plugin.ErrorKind{plugin.KindRetryable, plugin.KindPermanent, plugin.KindTargetUnreachable,
		plugin.KindUnsupported, plugin.KindNotVerified, plugin.KindAgentDied, plugin.KindTimeout, plugin.KindTargetMismatch}
	for _, a := range agents {
		m.mismatches.WithLabelValues(a)
		for _, method := range []string{MethodFence, MethodStatus, MethodUnfence} {
			for _, k := range kinds {
				m.errors.WithLabelValues(a, method, string(k))
			}
		}
	}
	if reg != nil {
		reg.MustRegister(m.latency, m.errors, m.mismatches)
	}
	return m
}

// countMismatch counts a call of agent that failed because its device is another machine's.
func (a *Caller) countMismatch(agent string, err error) {
	if err != nil && plugin.KindOf(err) == plugin.KindTargetMismatch {
		a.metrics.mismatches.WithLabelValues(agent).Inc()
	}
}
