package nodeagentwatch

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/caches"
	"github.com/kubefence/kubefence/pkg/caches/tombstone"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/oncall/life"
	"github.com/kubefence/kubefence/pkg/selffence"
)

// Incidents finds an incident by name in the incident record (pkg/incidents' Store).
type Incidents interface {
	Get(name string) *v1alpha1.NodeFence
}

// Queue is the incident loop's queue of nodes to look at, made by pkg/app before the loop
// and the watch: the watch asks the loop to look at a node by adding it.
type Queue interface{ Add(node string) }

// Options are what the watch is made of, by the process that wires it (pkg/app).
type Options struct {
	Config *v1alpha1.Config
	// Caches are the process's shared informer factories; the watch adds its handlers.
	Caches *caches.Set
	// Detector takes what the seat and the kubelet probes saw.
	Detector *detector.Detector
	// Incidents names the node of an incident a report holds.
	Incidents Incidents
	// Queue is the incident loop's queue of nodes to look at.
	Queue Queue
	// Now is the clock.
	Now func() time.Time
	// Identity names this replica among the agents' peers.
	Identity string
	// Registry takes the heartbeats' metrics; nil: a registry of its own.
	Registry *prometheus.Registry
}

// Watch is this replica's watch on the node agents: their reports, and its seat among
// their peers (when heartbeats are configured).
type Watch struct {
	cfg       *v1alpha1.Config
	nodes     corelisters.NodeLister
	detector  *detector.Detector
	incidents Incidents
	queue     Queue
	now       func() time.Time
	identity  string
	watchdogs *watchdogs
	// heartbeats is this replica's seat among the agents' peers; nil when off.
	heartbeats *heartbeats
}

// New makes the watch on opts' caches and adds its handlers; Start takes the seat.
func New(opts Options) (*Watch, error) {
	cfg := opts.Config
	w := &Watch{cfg: cfg, nodes: opts.Caches.Kube.Core().V1().Nodes().Lister(), detector: opts.Detector, incidents: opts.Incidents,
		queue: opts.Queue, now: opts.Now, identity: opts.Identity}
	w.watchdogs = newWatchdogs(cfg.Watchdog, func() time.Time { return w.now() })
	if cfg.Heartbeats != nil {
		reg := opts.Registry
		if reg == nil {
			reg = prometheus.NewRegistry()
		}
		w.heartbeats = newHeartbeats(cfg.Heartbeats, reg)
	}
	// Followed whatever the configuration: a fresh report refuses a person's confirm-off.
	if err := w.watchReports(opts.Caches.Reports.Coordination().V1().Leases().Informer()); err != nil {
		return nil, err
	}
	if _, err := opts.Caches.Fencing.Fencing().V1alpha1().NodeFences().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if nf, ok := tombstone.Unwrap(obj).(*v1alpha1.NodeFence); ok {
				w.watchdogs.forget(nf.Name, "")
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watch incidents: %w", err)
	}
	return w, nil
}

// Start takes this replica's seat among the node agents' peers, when heartbeats are
// configured, so that a new leader knows at once which agents are gone: standbys keep a
// seat too. The caches are started by whoever made them (caches.Set.Start).
func (w *Watch) Start(ctx context.Context) error {
	if w.heartbeats != nil {
		return w.startHeartbeats(ctx)
	}
	return nil
}

// Seat is this replica's seat among the node agents' peers: nil without heartbeats or
// before Start.
func (w *Watch) Seat() *nodeagent.Observer {
	if w.heartbeats == nil {
		return nil
	}
	return w.heartbeats.seat
}

// Verdict says whether the watchdog level's fence of node in incident nf is verified,
// waits, is contradicted, or cannot be counted on (selffence.Verify), from what this
// replica observed of the agents. issued says the level's attempt already passed its
// Fence step. An error is a cache read that failed.
func (w *Watch) Verdict(nf *v1alpha1.NodeFence, node *corev1.Node, issued bool) (selffence.Verdict, error) {
	members, err := w.nodes.List(labels.Everything())
	if err != nil {
		return selffence.Verdict{}, err
	}
	return w.watchdogs.verdict(nf, node, members, w.detector.LastLife(node.Name), w.agentLeft(node.Name), issued), nil
}

// Signs are what this replica saw of node's agent and kubelet that may show the node
// alive at now, each on this replica's clock, for a person's confirm-off: the agent's
// latest report, for the duration its Lease states, and the kubelet's latest answer to
// a probe (with heartbeats), for two kubelet check intervals, the longest a live
// kubelet goes between two answers to the routine checks.
func (w *Watch) Signs(node string, now time.Time) life.Signs {
	l := life.Signs{At: now, Agent: w.watchdogs.reported(node)}
	if w.heartbeats != nil {
		l.Probe = life.Seen{At: w.detector.KubeletAnswered(node), For: 2 * w.heartbeats.cfg.KubeletCheckInterval.Duration}
	}
	return l
}

// usesWatchdog reports whether a policy has a watchdog level.
func usesWatchdog(cfg *v1alpha1.Config) bool {
	for _, p := range cfg.Policies {
		for _, l := range p.Levels {
			if l.Watchdog {
				return true
			}
		}
	}
	return false
}

// watchReports follows the node agents' report Leases.
func (w *Watch) watchReports(inf cache.SharedIndexInformer) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onReport(obj) },
		UpdateFunc: func(_, obj any) { w.onReport(obj) },
		DeleteFunc: func(obj any) {
			if l, ok := tombstone.Unwrap(obj).(*coordinationv1.Lease); ok {
				w.watchdogs.forget("", nodeagent.NodeOf(l))
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watch node agent reports: %w", err)
	}
	return nil
}

func (w *Watch) onReport(obj any) {
	if l, ok := obj.(*coordinationv1.Lease); ok {
		w.ObserveReport(l)
	}
}

// ObserveReport records a node agent's report (its Lease), and, with a watchdog level or
// heartbeats configured, asks the incident loop to look at the nodes whose watchdog
// fence it may move on: its own, and those whose incidents it holds.
func (w *Watch) ObserveReport(l *coordinationv1.Lease) {
	holds := w.watchdogs.observe(l)
	if !usesWatchdog(w.cfg) && w.cfg.Heartbeats == nil {
		return
	}
	if node := nodeagent.NodeOf(l); node != "" {
		w.queue.Add(node)
	}
	for _, name := range holds {
		if nf := w.incidents.Get(name); nf != nil {
			w.queue.Add(nf.Spec.NodeName)
		}
	}
}
