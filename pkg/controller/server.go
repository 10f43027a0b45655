package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
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

// Serve serves /healthz, /readyz and /metrics on addr until ctx ends.
func Serve(ctx context.Context, addr string, h *Health, m *metrics) error {
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
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	klog.InfoS("Serving health and metrics", "address", ln.Addr().String())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		// Shutting down at exit: a scrape cut short is no loss.
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve on %s: %w", addr, err)
	}
	return nil
}
