package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/agentcall"
	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/caches"
	"github.com/kubefence/kubefence/pkg/coalesce"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/oncall"
	"github.com/kubefence/kubefence/pkg/remediate"
	"github.com/kubefence/kubefence/pkg/requests"
	"github.com/prometheus/client_golang/prometheus"
)

// NodeLeaseNamespace is where kubelets keep their heartbeat Leases.
const NodeLeaseNamespace = detector.LeaseNamespace

// Options are what the incident loop needs from the process that wires it (pkg/app).
type Options struct {
	Config *v1alpha1.Config
	Client kubernetes.Interface
	// Fencing is the typed client of NodeFences and KubefenceRemediations.
	Fencing versioned.Interface
	// Caches are the process's shared informer factories; the loop adds its handlers.
	Caches *caches.Set
	// Store is the incident record, read from Caches' NodeFences.
	Store *incidents.Store
	// Detector judges the nodes' health; the loop feeds it the Lease and Node events.
	Detector *detector.Detector
	// Caller reaches the agents; indexed on Caches' nodes by New.
	Caller *agentcall.Caller
	// Peers are the other controllers the loop asks; each may be nil (off).
	Peers    Peers
	Recorder record.EventRecorder
	// Registry takes the loop's metrics; nil: a registry of its own.
	Registry *prometheus.Registry
	// Identity names this replica (hostname_PID_suffix).
	Identity string
	// Now is the clock.
	Now func() time.Time
	// Leader is this replica's place among the replicas.
	Leader LeaderOptions
	// Tuning are the loop's knobs, each with a default.
	Tuning Tuning
}

// Peers are the controllers whose state the loop asks about, through their methods.
type Peers struct {
	// Health knows which remote agents do not answer; nil: every agent is taken as up.
	Health *agentcall.Health
	// Requests carries the health checkers' KubefenceRemediations; nil when off.
	Requests *requests.Requests
	// Pauses are the standing pause requests; nil: only the configuration pauses.
	Pauses *oncall.Pauses
}

// LeaderOptions say how this replica leads.
type LeaderOptions struct {
	// Guard checks the leader Lease before every write and irreversible action; nil
	// without leader election.
	Guard *leader.LeaseGuard
	// OnDeposed is called when a newer leader's epoch is found on an incident: the
	// replica must stop at once (main exits with code 2).
	OnDeposed func(error)
	// NodeName is the node this replica runs on (the downward API's spec.nodeName);
	// empty outside a pod. It is never fenced by this replica.
	NodeName string
	// IdentityRenewInterval is how often replicas renew their identity Leases; a node
	// whose replica renewed within three of them is alive and never fenced. Default 10s.
	IdentityRenewInterval time.Duration
}

// Tuning are the loop's knobs.
type Tuning struct {
	// Workers is how many nodes are synced at once; zero means DefaultWorkers.
	Workers int
	// PollInterval is how often a fenced state is read back while verifying.
	PollInterval time.Duration
	// PauseAt names a test pause point (PauseAtEnv); empty in production.
	PauseAt string
}

// Controller is the incident loop: it looks at each node when it, its Lease or one of its
// incidents changes, opens an incident for a node that is unhealthy, decides, fences
// through the agents, releases the node's workloads once the fence is verified, and
// recovers the node when it is back on a new boot, recording every step on the incident.
type Controller struct {
	opts     Options
	cfg      *v1alpha1.Config
	client   kubernetes.Interface
	caches   nodeCaches
	store    *incidents.Store
	detector *detector.Detector
	caller   *agentcall.Caller
	remedy   *remediate.Remediator
	queue    workqueue.TypedRateLimitingInterface[string]
	metrics  *metrics
	now      func() time.Time
	peers    peers
	lead     leadership
	events   eventLog
	decide   decisions
}

// nodeCaches are the loop's reads of the cluster, from the shared caches.
type nodeCaches struct {
	nodes       corelisters.NodeLister
	pods        cache.SharedIndexInformer
	pdbs        policylisters.PodDisruptionBudgetLister
	attachments storagelisters.VolumeAttachmentLister
	// nodeLeases reads node Leases live before incidents open, shared among them.
	nodeLeases *coalesce.Batch[string, *coordinationv1.Lease]
}

// peers are what the loop asks of the other controllers and of the replicas.
type peers struct {
	health   *agentcall.Health
	requests *requests.Requests
	pauses   *oncall.Pauses
	replicas *leader.Replicas
	// watchdogs follows the node agents' reports; heartbeats is this replica's seat
	// among the agents' peers (nil when off).
	watchdogs  *watchdogs
	heartbeats *heartbeats
}

// leadership is this replica's standing as leader: the Lease check and the epoch it acts
// at.
type leadership struct {
	guard *leader.LeaseGuard
	pause *pauser
	mu    sync.Mutex
	epoch int64
	// apiUnreachable is set when a read of a node Lease failed: the API server may be
	// down, and with it every kubelet's renewals (see confirmStale).
	apiUnreachable atomic.Bool
}

// eventLog holds each incident's Events until its next save.
type eventLog struct {
	recorder record.EventRecorder
	mu       sync.Mutex
	// pending are the events of each incident waiting for its next save.
	pending map[string][]pendingEvent
}

// decisions are what a decision shares with the others.
type decisions struct {
	// admission makes each fence decision and its claim on the budget one step.
	admission admission
	// gate lets a storm's releases go before their records.
	gate releaseGate
	mu   sync.Mutex
	// dryRunSeen holds, per node, the unhealthy episodes (keyed by when their evidence
	// started) already reported in dry run. A node's entry goes once it is healthy again
	// or deleted (forgetDryRun), so the map holds only nodes that are unhealthy now.
	dryRunSeen map[string]map[string]bool
}

// DefaultWorkers is how many nodes are synced at once by default. A worker stays with an
// incident through its API writes and the agent's Fence call, so this bounds how many
// incidents progress at once: with 16, a hundred nodes failing together were opened in
// waves, the last ones 1.9 s after they crossed their threshold (BenchmarkIncidentCost,
// then BenchmarkIncidentOverhead, on 2 cores; 13 ms with 100). An idle worker is a
// goroutine waiting on the queue.
const DefaultWorkers = 100

// New builds the incident loop on opts' caches; Run starts it.
func New(opts Options) (*Controller, error) {
	t := &opts.Tuning
	if t.Workers <= 0 {
		t.Workers = DefaultWorkers
	}
	if t.PollInterval <= 0 {
		t.PollInterval = 250 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Leader.IdentityRenewInterval <= 0 {
		opts.Leader.IdentityRenewInterval = 10 * time.Second
	}
	cfg := opts.Config
	c := &Controller{
		opts: opts, cfg: cfg, client: opts.Client, now: opts.Now, store: opts.Store, detector: opts.Detector, caller: opts.Caller,
		metrics: newMetrics(opts.Registry),
		peers: peers{health: opts.Peers.Health, requests: opts.Peers.Requests, pauses: opts.Peers.Pauses,
			replicas: leader.NewReplicas(opts.Leader.NodeName, opts.Leader.IdentityRenewInterval),
		},
		lead:   leadership{guard: opts.Leader.Guard, pause: &pauser{point: t.PauseAt}},
		events: eventLog{recorder: opts.Recorder, pending: map[string][]pendingEvent{}},
		decide: decisions{dryRunSeen: map[string]map[string]bool{}},
		// Per-node exponential backoff only: the default's cluster-wide 10 per second
		// bucket would queue a hundred simultaneous incidents behind each other.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubefence"}),
	}
	c.peers.watchdogs = newWatchdogs(cfg.Watchdog, func() time.Time { return c.now() })
	c.metrics.initCounters()
	if cfg.Heartbeats != nil {
		c.peers.heartbeats = newHeartbeats(cfg.Heartbeats, c.metrics.registry)
	}
	c.metrics.identity.WithLabelValues(opts.Identity).Set(1)
	if err := c.useCaches(opts); err != nil {
		return nil, err
	}
	if p := opts.Peers.Pauses; p != nil {
		// A pause, or its end, takes effect at every node's next sync, now.
		p.Notify(c.enqueueAll)
	}
	c.remedy = &remediate.Remediator{Client: opts.Client, Attachments: remediate.SharedAttachments(opts.Client), Pods: c.podsOn,
		CachedAttachments: func() []*storagev1.VolumeAttachment {
			vas, _ := c.caches.attachments.List(everything()) // a cache read fails only on a selector it cannot use
			return vas
		},
		Node: func(name string) (*corev1.Node, bool) {
			n, err := c.caches.nodes.Get(name)
			if err != nil {
				return nil, false
			}
			return n.DeepCopy(), true
		}}
	return c, nil
}

// useCaches takes the loop's reads from the shared caches and adds its handlers.
func (c *Controller) useCaches(opts Options) error {
	kube := opts.Caches.Kube
	nodeInf := kube.Core().V1().Nodes()
	podInf := kube.Core().V1().Pods()
	if err := podInf.Informer().AddIndexers(cache.Indexers{podsByNodeIndex: podsByNode}); err != nil {
		return fmt.Errorf("index pods: %w", err)
	}
	if err := c.caller.Index(nodeInf.Informer()); err != nil {
		return err
	}
	c.caches = nodeCaches{nodes: nodeInf.Lister(), pods: podInf.Informer(), pdbs: kube.Policy().V1().PodDisruptionBudgets().Lister(),
		attachments: kube.Storage().V1().VolumeAttachments().Lister(), nodeLeases: detector.LeaseReads(opts.Client)}
	if usesWatchdog(c.cfg) || c.cfg.Heartbeats != nil {
		if err := c.watchReports(opts.Caches.Reports.Coordination().V1().Leases().Informer()); err != nil {
			return err
		}
	}
	return c.watch(nodeInf.Informer(), opts.Caches.NodeLeases.Coordination().V1().Leases().Informer(),
		opts.Caches.Fencing.Fencing().V1alpha1().NodeFences().Informer(), opts.Caches.Identities.Coordination().V1().Leases().Informer())
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
func (c *Controller) watchReports(inf cache.SharedIndexInformer) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onReport(obj) },
		UpdateFunc: func(_, obj any) { c.onReport(obj) },
		DeleteFunc: func(obj any) {
			if l, ok := unwrapDeleted(obj).(*coordinationv1.Lease); ok {
				c.peers.watchdogs.forget("", nodeagent.NodeOf(l))
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watch node agent reports: %w", err)
	}
	return nil
}

// onReport records a node agent's report, and syncs the nodes whose watchdog fence it
// may move on: its own, and those whose incidents it holds.
func (c *Controller) onReport(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	holds := c.peers.watchdogs.observe(l)
	if node := nodeagent.NodeOf(l); node != "" {
		c.queue.Add(node)
	}
	for _, name := range holds {
		if nf := c.store.Get(name); nf != nil {
			c.queue.Add(nf.Spec.NodeName)
		}
	}
}

// watch queues a node when it, its Lease or one of its incidents changes, and follows
// the replicas' identity Leases.
func (c *Controller) watch(nodes, leases, incidents, identities cache.SharedIndexInformer) error {
	if _, err := identities.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onIdentityLease(obj) },
		UpdateFunc: func(_, obj any) { c.onIdentityLease(obj) },
		DeleteFunc: func(obj any) {
			if l, ok := unwrapDeleted(obj).(*coordinationv1.Lease); ok {
				c.peers.replicas.Forget(l.Name)
			}
		},
	}); err != nil {
		return fmt.Errorf("watch identity leases: %w", err)
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
			if nf, ok := unwrapDeleted(obj).(*v1alpha1.NodeFence); ok {
				c.store.Forget(nf.Name)
				c.dropEvents(nf.Name)
				c.decide.admission.unclaim(nf.Name)
				c.peers.watchdogs.forget(nf.Name, "")
			}
		},
	}); err != nil {
		return fmt.Errorf("watch incidents: %w", err)
	}
	return nil
}

// Enqueue asks the loop to look at node.
func (c *Controller) Enqueue(node string) { c.queue.Add(node) }

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

// Now is the loop's clock.
func (c *Controller) Now() time.Time { return c.now() }

// CheckLease reads the leader Lease fresh and passes while this replica leads at its
// epoch; a deposed replica is stopped (Options.Leader.OnDeposed).
func (c *Controller) CheckLease(ctx context.Context) error { return c.checkLease(ctx) }

// LeaseConfirmed passes when a Lease check passed within the renew deadline, and checks
// again otherwise.
func (c *Controller) LeaseConfirmed(ctx context.Context) error { return c.leaseConfirmed(ctx) }

// Remediator is the loop's release and undo of a node's workloads.
func (c *Controller) Remediator() *remediate.Remediator { return c.remedy }

// Record is the loop's record of incidents (steps, Events held for the save, the save at
// this replica's epoch), for the repairs of closed incidents.
func (c *Controller) Record() IncidentRecord { return IncidentRecord{c} }

func unwrapDeleted(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

func (c *Controller) enqueueObject(obj any) {
	if n, ok := unwrapDeleted(obj).(*corev1.Node); ok {
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

func (c *Controller) onIdentityLease(obj any) {
	if l, ok := obj.(*coordinationv1.Lease); ok {
		c.peers.replicas.Observe(l, c.now())
	}
}

func (c *Controller) onNodeFence(obj any) {
	if nf, ok := obj.(*v1alpha1.NodeFence); ok && nf.Spec.NodeName != "" {
		c.queue.Add(nf.Spec.NodeName)
		c.peers.requests.OnIncident(nf)
	}
}

// Start starts what a standby keeps warm too: this replica's seat among the node agents'
// peers, so that a new leader knows at once which agents are gone. The caches are started
// by whoever made them (caches.Set.Start).
func (c *Controller) Start(ctx context.Context) error {
	if c.peers.heartbeats != nil {
		return c.startHeartbeats(ctx)
	}
	return nil
}

// Run acts as leader with the given fencing epoch until ctx ends.
func (c *Controller) Run(ctx context.Context, epoch int64) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.lead.mu.Lock()
	c.lead.epoch = epoch
	c.lead.mu.Unlock()
	c.metrics.leader.Set(1)
	// Open incidents resume from their status; new ones need evidence gathered while this
	// replica leads (see Detector.RestartClocks).
	c.detector.RestartClocks(c.now())
	klog.FromContext(ctx).Info("Acting as leader", "identity", c.opts.Identity, "epoch", epoch)
	c.enqueueAll()
	for range c.opts.Tuning.Workers {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	// Leases that stop changing produce no events: look at every node regularly.
	go wait.UntilWithContext(ctx, func(context.Context) {
		c.enqueueAll()
		c.refreshUnhealthy(c.now())
	}, 5*time.Second)
	<-ctx.Done()
}

func (c *Controller) currentEpoch() int64 {
	c.lead.mu.Lock()
	defer c.lead.mu.Unlock()
	return c.lead.epoch
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

// IncidentRecord is the incident loop's record of an incident (steps, Events held for the
// save, the save at this replica's epoch).
type IncidentRecord struct{ c *Controller }

// Step adds a timeline step to nf.
func (r IncidentRecord) Step(ctx context.Context, nf *v1alpha1.NodeFence, typ, msg string) {
	r.c.step(ctx, nf, r.c.now(), typ, msg)
}

// Event holds an Event of nf (or, with nf nil, of node) for its next save.
func (r IncidentRecord) Event(node *corev1.Node, nf *v1alpha1.NodeFence, typ, reason, format string, args ...any) {
	r.c.event(node, nf, typ, reason, format, args...)
}

// Save writes nf's status at this replica's epoch.
func (r IncidentRecord) Save(ctx context.Context, nf *v1alpha1.NodeFence) error {
	return r.c.save(ctx, nf)
}
