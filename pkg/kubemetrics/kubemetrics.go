package kubemetrics

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// The metrics live for the whole process: client-go takes one provider per process, so
// that every registry they are put on shows the same values.
var (
	queueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "depth", Help: "Current depth of the workqueue."}, []string{"name"})
	queueAdds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "workqueue", Name: "adds_total", Help: "Total number of adds handled by the workqueue."}, []string{"name"})
	queueLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: "workqueue", Name: "queue_duration_seconds", Help: "How long in seconds an item stays in the workqueue before being requested.",
		Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12)}, []string{"name"})
	queueWork = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: "workqueue", Name: "work_duration_seconds", Help: "How long in seconds processing an item from the workqueue takes.",
		Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12)}, []string{"name"})
	queueUnfinished = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "unfinished_work_seconds",
		Help: "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads."},
		[]string{"name"})
	queueLongest = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "longest_running_processor_seconds",
		Help: "How many seconds has the longest running processor for the workqueue been running."}, []string{"name"})
	queueRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "workqueue", Name: "retries_total", Help: "Total number of retries handled by the workqueue."}, []string{"name"})

	requestLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rest_client_request_duration_seconds", Help: "Request latency in seconds, by verb and host.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}}, []string{"verb", "host"})
	requestResults = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total", Help: "Number of HTTP requests, by status code, method and host."}, []string{"code", "method", "host"})
	rateLimiterLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rest_client_rate_limiter_duration_seconds", Help: "Client-side rate limiter latency in seconds, by verb and host.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}}, []string{"verb", "host"})

	leaderStatus = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leader_election_master_status", Help: "1 while this process leads the named lease, 0 once it stopped."}, []string{"name"})
	leaderSlowpath = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leader_election_slowpath_total", Help: "Renewals of the named lease that took the slow path (a full update)."}, []string{"name"})

	collectors = []prometheus.Collector{queueDepth, queueAdds, queueLatency, queueWork, queueUnfinished, queueLongest, queueRetries,
		requestLatency, requestResults, rateLimiterLatency, leaderStatus, leaderSlowpath}

	install sync.Once
)

// Install hands client-go the providers of these metrics. client-go keeps the first
// provider it is given and reads it when a workqueue or leader elector is made, so
// Install runs before any of them is (Register calls it too). It may be called again.
func Install() {
	install.Do(func() {
		workqueue.SetProvider(queueMetrics{})
		metrics.Register(metrics.RegisterOpts{
			RequestLatency:     latency{requestLatency},
			RateLimiterLatency: latency{rateLimiterLatency},
			RequestResult:      results{},
		})
		leaderelection.SetProvider(leaderMetrics{})
	})
}

// Register installs the providers (Install) and registers the metrics on reg. Metrics
// already there (a second Register on the same registry) are not an error.
func Register(reg prometheus.Registerer) error {
	Install()
	var errs []error
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// queueMetrics is workqueue.MetricsProvider.
type queueMetrics struct{}

func (queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return queueDepth.WithLabelValues(name)
}
func (queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return queueAdds.WithLabelValues(name)
}
func (queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return queueLatency.WithLabelValues(name)
}
func (queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return queueWork.WithLabelValues(name)
}
func (queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return queueUnfinished.WithLabelValues(name)
}
func (queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return queueLongest.WithLabelValues(name)
}
func (queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return queueRetries.WithLabelValues(name)
}

// latency is metrics.LatencyMetric on a histogram by verb and host.
type latency struct{ h *prometheus.HistogramVec }

func (l latency) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	l.h.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}

// results is metrics.ResultMetric.
type results struct{}

func (results) Increment(_ context.Context, code, method, host string) {
	requestResults.WithLabelValues(code, method, host).Inc()
}

// leaderMetrics is leaderelection.MetricsProvider.
type leaderMetrics struct{}

func (leaderMetrics) NewLeaderMetric() leaderelection.LeaderMetric { return leaderSwitch{} }

type leaderSwitch struct{}

func (leaderSwitch) On(name string)                { leaderStatus.WithLabelValues(name).Set(1) }
func (leaderSwitch) Off(name string)               { leaderStatus.WithLabelValues(name).Set(0) }
func (leaderSwitch) SlowpathExercised(name string) { leaderSlowpath.WithLabelValues(name).Inc() }
