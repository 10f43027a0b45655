// Package kubemetrics puts client-go's own metrics on kubefence's Prometheus registry:
// its workqueues (depth, adds, latency, work duration, retries), its REST clients
// (request latency and results, client-side throttling) and leader election (who leads,
// slow-path renewals), under the names Kubernetes components use, so that their
// dashboards and alerts read them. It owns no state of its own beyond those metrics.
package kubemetrics
