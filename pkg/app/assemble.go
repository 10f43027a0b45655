package app

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/caches"
	"github.com/kubefence/kubefence/pkg/controller"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/devicemonitor"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/maintenance"
	"github.com/kubefence/kubefence/pkg/nodeagentwatch"
	"github.com/kubefence/kubefence/pkg/nodeview"
	"github.com/kubefence/kubefence/pkg/oncall"
	"github.com/kubefence/kubefence/pkg/orphans"
	"github.com/kubefence/kubefence/pkg/podrelease"
	"github.com/kubefence/kubefence/pkg/requests"
)

// Controllers are the process's controllers, on one set of shared caches: the incident
// loop and the leader's housekeepers around it.
type Controllers struct {
	Config *v1alpha1.Config
	Caches *caches.Set
	Loop   *controller.Controller
	// Guard is this replica's standing as leader, which every controller shares.
	Guard     *leader.Guard
	Agents    *nodeagentwatch.Watch
	Health    *fencecall.Health
	Requests  *requests.Requests
	Monitor   *devicemonitor.Monitor
	Orphans   *orphans.Repair
	Retention *incidents.Retention
	// Planned follows the planned-absence kinds (Machines, NodeMaintenances), and those
	// installed after the start once Run finds them.
	Planned *maintenance.Reader
}

// Assembly is what the controllers are built from.
type Assembly struct {
	Config   *v1alpha1.Config
	Kube     kubernetes.Interface
	Fencing  versioned.Interface
	Dynamic  dynamic.Interface
	Agents   fencecall.Source
	Recorder record.EventRecorder
	Registry *prometheus.Registry
	Identity string
	// Lease checks the leader Lease (nil without leader election); OnDeposed stops a
	// replica a newer leader replaced. Assemble makes of them the one leader.Guard every
	// controller shares.
	Lease     *leader.LeaseGuard
	OnDeposed func(error)
	Leader    controller.LeaderOptions
	Tuning    controller.Tuning
	// TargetInterval is how often the leader reads every fence device.
	TargetInterval time.Duration
	// PauseConfigMap names the pause requests' ConfigMap in the controller's namespace.
	PauseConfigMap string
}

// Assemble builds every controller of the process on one set of caches; nothing runs
// until the caches are started (Caches.Start) and the replica leads (Lead).
func Assemble(a Assembly) (*Controllers, error) {
	cfg := a.Config
	if a.PauseConfigMap == "" {
		a.PauseConfigMap = oncall.DefaultPauseConfigMap
	}
	set, err := caches.New(a.Kube, a.Fencing, a.Dynamic, cfg.LeaderElection.Namespace, cfg.Watchdog.Namespace, a.PauseConfigMap)
	if err != nil {
		return nil, err
	}
	store, err := incidents.New(a.Fencing.FencingV1alpha1().NodeFences(), set.Fencing.Fencing().V1alpha1().NodeFences().Informer())
	if err != nil {
		return nil, err
	}
	det := detector.ForConfig(cfg)
	now := time.Now // the process's one clock, handed to every controller
	guard := leader.NewGuard(a.Lease, now, a.OnDeposed)
	queue := controller.NewQueue() // the loop's, which the peers that ask it to look at a node add to
	releaser := podrelease.OnCaches(a.Kube, set.Kube, now, 0)
	admission := &nodeview.Admission{} // the loop's decisions, whose fences tell the record a storm
	rec := &incidents.Recorder{Store: store, Guard: guard, Identity: a.Identity, Events: a.Recorder, Now: now, Fencing: admission}
	nodes := set.Kube.Core().V1().Nodes().Lister()
	caller, err := fencecall.New(a.Agents, cfg, a.Kube, fencecall.NewMetrics(a.Registry, agentNames(cfg)), now,
		func() ([]*corev1.Node, error) { return nodes.List(labels.Everything()) })
	if err != nil {
		return nil, err
	}
	planned, err := maintenance.New(a.Kube.Discovery(), set.Dynamic)
	if err != nil {
		return nil, err
	}
	out := &Controllers{Config: cfg, Caches: set, Guard: guard, Health: &fencecall.Health{}, Planned: planned}
	if cfg.ExternalRemediation.Enabled {
		out.Requests, err = requests.New(requests.Options{Informer: set.Fencing.Fencing().V1alpha1().KubefenceRemediations(),
			Fencing: a.Fencing, Machines: a.Dynamic, Nodes: nodes, Policies: cfg.Policies, Incidents: store,
			Queue: queue, Confirm: guard.Check})
		if err != nil {
			return nil, err
		}
	}
	out.Agents, err = nodeagentwatch.New(nodeagentwatch.Options{Config: cfg, Caches: set, Detector: det, Incidents: store,
		Queue: queue, Now: now, Identity: a.Identity, Registry: a.Registry})
	if err != nil {
		return nil, err
	}
	pauses, err := oncall.NewPauses(set.Pauses.Core().V1().ConfigMaps().Informer(), cfg.Paused, a.Registry)
	if err != nil {
		return nil, err
	}
	loop, err := controller.New(controller.Options{Config: cfg, Client: a.Kube, Fencing: a.Fencing, Caches: set, Store: store,
		Detector: det, Caller: caller, Peers: controller.Peers{Health: out.Health, Requests: out.Requests, Agents: out.Agents, Maintenance: planned, Pauses: pauses},
		Registry: a.Registry, Identity: a.Identity, Shared: controller.Shared{Now: now, Guard: guard, Record: rec, Queue: queue, Releaser: releaser, Admission: admission},
		Leader: a.Leader, Tuning: a.Tuning})
	if err != nil {
		return nil, fmt.Errorf("new controller: %w", err)
	}
	out.Loop = loop
	out.Monitor = devicemonitor.New(devicemonitor.Monitor{Checker: caller, Policies: cfg.Policies, Nodes: nodes, Client: a.Kube,
		LastLife: det.LastLife, Confirm: guard.Confirmed, Recorder: a.Recorder, Interval: a.TargetInterval, Planned: planned},
		a.Registry, cfg.Detection.ExpectedRenewInterval.Duration)
	out.Orphans = orphans.New(orphans.Repair{Nodes: nodes, Incidents: store, Releaser: releaser, Record: rec,
		Check: guard.Check, Confirmed: guard.Confirmed}, a.Registry)
	out.Retention = &incidents.Retention{Store: store, History: cfg.History, Confirm: guard.Check, Now: now}
	return out, nil
}

// Lead runs, while this replica leads at epoch, the incident loop and the leader's
// housekeepers, until ctx ends.
func (c *Controllers) Lead(ctx context.Context, epoch int64) {
	// Before any of them runs: each write and irreversible action carries, and is
	// checked at, this epoch.
	c.Guard.Lead(epoch)
	// Every fence device is read now and then regularly, as Pacemaker's monitor does.
	go c.Monitor.Run(ctx)
	// At take-over and then regularly, find what a dead predecessor left behind.
	go c.Orphans.Run(ctx)
	if c.Requests != nil {
		go c.Requests.Run(ctx)
	}
	// Ended incidents are kept as history, within the configured retention.
	go c.Retention.Run(ctx)
	c.Loop.Run(ctx)
}

func agentNames(cfg *v1alpha1.Config) []string {
	names := make([]string, 0, len(cfg.Agents))
	for _, a := range cfg.Agents {
		names = append(names, a.Name)
	}
	return names
}
