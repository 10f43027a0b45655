package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kubefence/kubefence/pkg/buildinfo"
)

// newRegistry is the process's metrics registry (served on /metrics): kubefence_build_info
// and the Go and process collectors; every controller adds its own metrics to it.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubefence_build_info",
		Help: "Always 1; the labels say which build runs: version, revision and Go version.",
	}, []string{"version", "revision", "goversion"})
	buildInfo.WithLabelValues(buildinfo.Version(), buildinfo.Revision(), buildinfo.GoVersion()).Set(1)
	reg.MustRegister(buildInfo, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
