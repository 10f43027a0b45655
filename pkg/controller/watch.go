package controller

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/caches/tombstone"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/loopmetrics"
	"github.com/kubefence/kubefence/pkg/testpoint"
)

// New builds the incident loop on opts' caches; Run starts it.
func New(opts Options) (*Controller, error) {
	t := &opts.Tuning
	if t.Workers <= 0 {
		t.Workers = DefaultWorkers
	}
	if t.PollInterval <= 0 {
		t.PollInterval = 250 * time.Millisecond
	}
	if sh := opts.Shared; sh.Now == nil || sh.Guard == nil || sh.Record == nil || sh.Queue == nil || sh.Releaser == nil || sh.Admission == nil {
		return nil, fmt.Errorf("options: Shared.Now, Guard, Record, Queue, Releaser and Admission are required")
	}
	if opts.Leader.IdentityRenewInterval <= 0 {
		opts.Leader.IdentityRenewInterval = 5 * time.Second
	}
	if opts.Peers.Agents == nil {
		return nil, fmt.Errorf("options: Peers.Agents is required")
	}
	cfg := opts.Config
	c := &Controller{
		opts: opts, cfg: cfg, client: opts.Client, now: opts.Shared.Now, store: opts.Store, detector: opts.Detector, caller: opts.Caller,
		metrics: loopmetrics.New(opts.Registry),
		peers: peers{health: opts.Peers.Health, requests: opts.Peers.Requests, agents: opts.Peers.Agents, maintenance: opts.Peers.Maintenance, pauses: opts.Peers.Pauses,
			replicas: leader.NewReplicas(opts.Leader.NodeName, opts.Leader.IdentityRenewInterval),
		},
		lead:   leadership{guard: opts.Shared.Guard, pause: testpoint.New(t.PauseAt)},
		record: opts.Shared.Record,
		queue:  opts.Shared.Queue, releaser: opts.Shared.Releaser, decide: decisions{admission: opts.Shared.Admission},
	}
	c.metrics.InitCounters()
	c.metrics.Identity.WithLabelValues(opts.Identity).Set(1)
	if err := c.useCaches(opts); err != nil {
		return nil, err
	}
	if p := opts.Peers.Pauses; p != nil {
		// A pause, or its end, takes effect at every node's next sync, now.
		p.Notify(c.enqueueAll)
	}
	return c, nil
}

// useCaches takes the loop's reads from the shared caches and adds its handlers.
func (c *Controller) useCaches(opts Options) error {
	kube := opts.Caches.Kube
	nodeInf := kube.Core().V1().Nodes()
	podInf := kube.Core().V1().Pods()
	if err := c.caller.Index(nodeInf.Informer()); err != nil {
		return err
	}
	c.caches = nodeCaches{nodes: nodeInf.Lister(), pods: podInf.Informer(), pdbs: kube.Policy().V1().PodDisruptionBudgets().Lister(),
		attachments: kube.Storage().V1().VolumeAttachments().Lister(), nodeLeases: detector.LeaseReads(opts.Client)}
	return c.watch(nodeInf.Informer(), opts.Caches.NodeLeases.Coordination().V1().Leases().Informer(),
		opts.Caches.Fencing.Fencing().V1alpha1().NodeFences().Informer(), opts.Caches.Identities.Coordination().V1().Leases().Informer())
}

// watch queues a node when it, its Lease or one of its incidents changes, and has the
// replicas follow their identity Leases (leader.Replicas.Follow).
func (c *Controller) watch(nodes, leases, incidents, identities cache.SharedIndexInformer) error {
	if err := c.peers.replicas.Follow(identities, c.now); err != nil {
		return err
	}
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueObject(obj) },
		UpdateFunc: func(_, obj any) { c.enqueueObject(obj) },
		DeleteFunc: func(obj any) { c.enqueueObject(obj) },
	}); err != nil {
		return fmt.Errorf("watch nodes: %w", err)
	}
	if _, err := leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onLease(obj) },
		UpdateFunc: func(_, obj any) { c.onLease(obj) },
	}); err != nil {
		return fmt.Errorf("watch node leases: %w", err)
	}
	if _, err := incidents.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onNodeFence(obj) },
		UpdateFunc: func(_, obj any) { c.onNodeFence(obj) },
		DeleteFunc: func(obj any) {
			// A deleted incident's last write has nothing left to stand in for.
			if nf, ok := tombstone.Unwrap(obj).(*v1alpha1.NodeFence); ok {
				c.store.Forget(nf.Name)
				c.record.Drop(nf.Name)
				c.decide.admission.Unclaim(nf.Name)
			}
		},
	}); err != nil {
		return fmt.Errorf("watch incidents: %w", err)
	}
	return nil
}

// enqueueAll asks the loop to look at every node.
func (c *Controller) enqueueAll() {
	nodes, err := c.caches.nodes.List(everything())
	if err != nil {
		return // a cache read; the periodic round tries again
	}
	for _, n := range nodes {
		c.queue.Add(n.Name)
	}
}

func (c *Controller) enqueueObject(obj any) {
	if n, ok := tombstone.Unwrap(obj).(*corev1.Node); ok {
		c.queue.Add(n.Name)
	}
}

func (c *Controller) onLease(obj any) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	c.detector.ObserveLease(lease, c.now())
	c.queue.Add(lease.Name)
}

func (c *Controller) onNodeFence(obj any) {
	if nf, ok := obj.(*v1alpha1.NodeFence); ok && nf.Spec.NodeName != "" {
		c.queue.Add(nf.Spec.NodeName)
		c.peers.requests.OnIncident(nf)
	}
}

// Run acts as leader, at the epoch the guard leads at (Shared.Guard.Lead, set by pkg/app
// before anything runs), until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.metrics.Leader.Set(1)
	// Open incidents resume from their status; new ones need evidence this replica
	// gathered itself, while it led or stood by with the API server in reach.
	from := c.takeOver(c.now())
	klog.FromContext(ctx).Info("Acting as leader", "identity", c.opts.Identity, "epoch", c.lead.guard.Epoch(), "leaseSilenceCountsFrom", from)
	c.enqueueAll()
	for range c.opts.Tuning.Workers {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	// Leases that stop changing produce no events: look at every node regularly.
	go wait.UntilWithContext(ctx, func(context.Context) {
		c.enqueueAll()
		c.refreshUnhealthy(c.now())
		c.refreshFenced()
	}, 5*time.Second)
	<-ctx.Done()
}

// takeOver restarts the detector's Lease clocks as this replica takes the lead at now,
// and returns the time they count from: the start of this replica's unbroken reach of
// the API server (leader.Reach), during which it watched the node Leases as a standby,
// or now when it has none. A standby that watched a node go silent judges it on the
// silence it saw, not on a fresh one: the leader's own node is judged as soon as any
// node would be. The floor: no silence is counted across a break in this replica's own
// reach of the API server (a failed or unanswered call, or MaxGap without an answer),
// nor from anything the old leader saw or wrote.
func (c *Controller) takeOver(now time.Time) time.Time {
	from := c.opts.Leader.Reach.Since(now)
	if from.IsZero() || from.After(now) {
		from = now
	}
	c.detector.RestartClocks(from)
	return from
}

func (c *Controller) worker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	requeue, err := c.sync(ctx, key)
	switch {
	case err != nil:
		utilruntime.HandleErrorWithContext(ctx, err, "Sync failed", "node", key)
		c.queue.AddRateLimited(key)
	case requeue > 0:
		c.queue.Forget(key)
		c.queue.AddAfter(key, requeue)
	default:
		c.queue.Forget(key)
	}
	return true
}

// refreshUnhealthy sets kubefence_nodes_unhealthy from every node as it stands now (those
// the detector finds unhealthy and those with an open incident, as the budget counts
// them) and kubefence_nodes_fence_failed (nodes whose last incident failed and that get
// no new one until they recover or a person acts). It runs on its own period, so the
// gauges follow cancelled, recovered and adopted incidents, not only decisions. The
// counting is nodeview.Sources.Unhealthy's.
func (c *Controller) refreshUnhealthy(now time.Time) {
	unhealthy, failed, err := c.sources().Unhealthy(now, c.failedUnrecovered)
	if err != nil {
		return // a cache read; the gauges keep their values until the next round
	}
	c.metrics.Unhealthy.Set(float64(unhealthy))
	c.metrics.FailedNodes.Set(float64(failed))
}

// refreshFenced sets kubefence_node_fenced_timestamp_seconds from the cached incidents:
// the open ones whose fence holds, which KubefenceNodeLeftOff reads. Like
// refreshUnhealthy it runs on its own period, so the series goes with a recovered,
// cancelled or deleted incident.
func (c *Controller) refreshFenced() {
	c.metrics.SetFenced(loopmetrics.FencedNodes(c.store.Cached(), c.cfg.Policies))
}
