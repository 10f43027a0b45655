package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kubefence/kubefence/pkg/serving"
)

// Health reports liveness and readiness.
type Health struct {
	// ReadyOnlyWhenLeader makes /readyz succeed only on the leader, so that a Service
	// selecting ready pods reaches the leader alone.
	ReadyOnlyWhenLeader bool
	synced              atomic.Bool
	leader              atomic.Bool
}

// SetSynced marks the caches as synced.
func (h *Health) SetSynced() { h.synced.Store(true) }

// SetLeader marks this replica as the leader.
func (h *Health) SetLeader() { h.leader.Store(true) }

func (h *Health) ready() bool {
	if h.ReadyOnlyWhenLeader {
		return h.leader.Load()
	}
	return h.synced.Load()
}

// ServingOptions say where and how the health probes and the metrics are served.
type ServingOptions struct {
	// HealthAddress serves /healthz and /readyz over plain HTTP without authentication,
	// for the kubelet's probes.
	HealthAddress string
	// MetricsAddress serves /metrics; MetricsOff ("0") serves no metrics.
	MetricsAddress string
	// MetricsSecure serves /metrics over HTTPS, only to clients whose bearer token the
	// apiserver authenticates (TokenReview) and whose identity may get the path
	// (SubjectAccessReview). False serves plain HTTP to anyone, for a trusted network.
	MetricsSecure bool
	// TLSCertFile and TLSKeyFile are the metrics server's certificate and key (PEM); when
	// both are empty a self-signed pair is made at start.
	TLSCertFile, TLSKeyFile string
	// ReadyOnlyWhenLeader makes /readyz succeed only on the leader (Health's).
	ReadyOnlyWhenLeader bool
}

// MetricsOff as the metrics address serves no metrics, as in controller-runtime.
const MetricsOff = "0"

// serve starts the health server and the metrics server of o; each reports its end on
// errc. Listening happens now, so that a taken port fails the start.
func serve(ctx context.Context, o ServingOptions, client kubernetes.Interface, h *Health, reg *prometheus.Registry, errc chan<- error) error {
	healthLn, err := net.Listen("tcp", o.HealthAddress)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.HealthAddress, err)
	}
	klog.FromContext(ctx).Info("Serving health probes", "address", healthLn.Addr().String())
	go func() { errc <- serving.Serve(ctx, healthLn, healthMux(h), nil) }()
	if o.MetricsAddress == MetricsOff {
		klog.FromContext(ctx).Info("Serving no metrics", "metricsBindAddress", o.MetricsAddress)
		return nil
	}
	var handler http.Handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	var tlsConfig *tls.Config
	if o.MetricsSecure {
		host, _ := os.Hostname()
		if tlsConfig, err = serving.TLSConfig(o.TLSCertFile, o.TLSKeyFile, host); err != nil {
			return err
		}
		handler = serving.NewDelegated(client, serving.DefaultCacheTTL, serving.DefaultCacheSize, clock.RealClock{}).Wrap(handler)
	}
	metricsLn, err := net.Listen("tcp", o.MetricsAddress)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.MetricsAddress, err)
	}
	klog.FromContext(ctx).Info("Serving metrics", "address", metricsLn.Addr().String(), "secure", o.MetricsSecure)
	mux := http.NewServeMux()
	mux.Handle("/metrics", handler)
	go func() { errc <- serving.Serve(ctx, metricsLn, mux, tlsConfig) }()
	return nil
}

func healthMux(h *Health) *http.ServeMux {
	mux := http.NewServeMux()
	// A failed write means the prober went away; there is no one left to tell.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !h.ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}
