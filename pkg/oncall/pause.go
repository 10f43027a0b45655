package oncall

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/caches/tombstone"
)

// ConfigReason is the pause reason of the configuration's `paused: true`.
const ConfigReason = "config.paused"

// DefaultPauseConfigMap is the pause requests' ConfigMap when the controller's
// --pause-configmap does not name another (the chart names its release's).
const DefaultPauseConfigMap = "kubefence-pause"

// Pauses are the standing pause requests: every data entry of one ConfigMap in the
// controller's namespace (--pause-configmap, the chart's <release>-pause, labelled
// PauseLabel), like NodeHealthCheck's pauseRequests. A ConfigMap, not a resource of its
// own: a pause needs no new API, and RBAC names exactly that ConfigMap (resourceNames) for
// the controller to read and the on-call role to edit. Every replica follows it through
// its informer, which selects it by name; no restart, and a change syncs every node at
// once (Notify).
type Pauses struct {
	mu       sync.Mutex
	config   bool
	requests map[string]string // "ConfigMap/key" → value
	notify   func()
	gauge    *prometheus.GaugeVec
}

// NewPauses follows the pause ConfigMap of inf (an informer of the controller's
// namespace that selects it by name); config is the configuration's `paused`. The gauge
// kubefence_paused{reason} is registered on reg.
func NewPauses(inf cache.SharedIndexInformer, config bool, reg prometheus.Registerer) (*Pauses, error) {
	p := &Pauses{config: config, requests: map[string]string{},
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kubefence_paused",
			Help: "1 for each standing pause request (reason: the pause ConfigMap's key, or config.paused): no new fence is sent while any stands."},
			[]string{"reason"})}
	if reg != nil {
		if err := reg.Register(p.gauge); err != nil {
			return nil, fmt.Errorf("register kubefence_paused: %w", err)
		}
	}
	if config {
		p.gauge.WithLabelValues(ConfigReason).Set(1)
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.observe(obj, false) },
		UpdateFunc: func(_, obj any) { p.observe(obj, false) },
		DeleteFunc: func(obj any) { p.observe(tombstone.Unwrap(obj), true) },
	})
	if err != nil {
		return nil, fmt.Errorf("watch pause requests: %w", err)
	}
	return p, nil
}

// Notify sets what is called after the pause requests change: the incident loop syncs
// every node, so that a pause takes effect within one sync.
func (p *Pauses) Notify(f func()) {
	p.mu.Lock()
	p.notify = f
	p.mu.Unlock()
}

func (p *Pauses) observe(obj any, deleted bool) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	p.mu.Lock()
	changed := false
	for key := range p.requests {
		if name, _, _ := strings.Cut(key, "/"); name == cm.Name {
			if _, still := cm.Data[strings.TrimPrefix(key, name+"/")]; deleted || !still {
				delete(p.requests, key)
				p.gauge.DeleteLabelValues(reasonOf(key))
				changed = true
			}
		}
	}
	if !deleted {
		for k, v := range cm.Data {
			key := cm.Name + "/" + k
			if old, ok := p.requests[key]; !ok || old != v {
				p.requests[key] = v
				p.gauge.WithLabelValues(k).Set(1)
				changed = true
			}
		}
	}
	notify := p.notify
	p.mu.Unlock()
	if changed && notify != nil {
		notify()
	}
}

func reasonOf(key string) string {
	_, k, _ := strings.Cut(key, "/")
	return k
}

// Why says why fencing is paused, each request as "reason: value", or "" when it is
// not.
func (p *Pauses) Why() string {
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return whyPaused(p.config, p.requests)
}

// whyPaused lists the pause requests ("ConfigMap/key" → value) and the configuration's
// paused, sorted.
func whyPaused(config bool, requests map[string]string) string {
	var out []string
	if config {
		out = append(out, ConfigReason+": true in the configuration")
	}
	for key, v := range requests {
		out = append(out, reasonOf(key)+": "+v)
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}
