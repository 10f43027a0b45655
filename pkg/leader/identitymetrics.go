package leader

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of kubefence_identity_lease_renewals_total.
const (
	renewalSuccess = "success"
	renewalFailure = "failure"
)

// IdentityLeaseMetrics export what IdentityLeases does with this replica's own Lease, as
// the apiserver-identity proposal's metrics do.
type IdentityLeaseMetrics struct {
	start, renew prometheus.Gauge
	renewals     *prometheus.CounterVec
}

// NewIdentityLeaseMetrics makes the metrics and registers them on reg.
func NewIdentityLeaseMetrics(reg prometheus.Registerer) *IdentityLeaseMetrics {
	m := &IdentityLeaseMetrics{
		start: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubefence_identity_lease_start_time_seconds",
			Help: "When this replica's identity Lease was acquired (Unix seconds).",
		}),
		renew: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubefence_identity_lease_renew_time_seconds",
			Help: "When this replica's identity Lease was last renewed (Unix seconds).",
		}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubefence_identity_lease_renewals_total",
			Help: "Renewals of this replica's identity Lease, by result.",
		}, []string{"result"}),
	}
	reg.MustRegister(m.start, m.renew, m.renewals)
	return m
}

// Renewal counts a renewal of this replica's identity Lease.
func (m *IdentityLeaseMetrics) Renewal(ok bool) {
	result := renewalSuccess
	if !ok {
		result = renewalFailure
	}
	m.renewals.WithLabelValues(result).Inc()
}

// Renewed exports when this replica's identity Lease was acquired and last renewed.
func (m *IdentityLeaseMetrics) Renewed(acquired, renewed time.Time) {
	if !acquired.IsZero() {
		m.start.Set(float64(acquired.UnixMicro()) / 1e6)
	}
	m.renew.Set(float64(renewed.UnixMicro()) / 1e6)
}
