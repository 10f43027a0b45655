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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
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
	"github.com/kubefence/kubefence/pkg/coalesce"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/devicemonitor"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	fencinginformers "github.com/kubefence/kubefence/pkg/generated/informers/externalversions"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/orphans"
	"github.com/kubefence/kubefence/pkg/remediate"
	"github.com/kubefence/kubefence/pkg/requests"
	"github.com/prometheus/client_golang/prometheus"
)

// NodeLeaseNamespace is where kubelets keep their heartbeat Leases.
const NodeLeaseNamespace = detector.LeaseNamespace

// Options are what the controller needs from main.
type Options struct {
	Config *v1alpha1.Config
	Client kubernetes.Interface
	// Fencing is the typed client of NodeFences and KubefenceRemediations.
	Fencing versioned.Interface
	// Dynamic reads Cluster API Machines (config externalRemediation); may be nil.
	Dynamic dynamic.Interface
	Agents  agentcall.Source
	// Health knows which remote agents do not answer; nil: every agent is taken as up.
	Health   *agentcall.Health
	Recorder record.EventRecorder
	// Identity names this replica (hostname_PID_suffix).
	Identity string
	// Workers is how many nodes are synced at once; zero means DefaultWorkers.
	Workers int
	// PollInterval is how often a fenced state is read back while verifying.
	PollInterval time.Duration
	// Now is the clock.
	Now func() time.Time
	// OnDeposed is called when a newer leader's epoch is found on an incident: the
	// replica must stop at once (main exits with code 2).
	OnDeposed func(error)
	// Guard checks the leader Lease before every write and irreversible action; nil
	// without leader election.
	Guard *leader.LeaseGuard
	// NodeName is the node this replica runs on (the downward API's spec.nodeName);
	// empty outside a pod. It is never fenced by this replica.
	NodeName string
	// IdentityRenewInterval is how often replicas renew their identity Leases; a node
	// whose replica renewed within three of them is alive and never fenced. Default 10s.
	IdentityRenewInterval time.Duration
	// PauseAt names a test pause point (PauseAtEnv); empty in production.
	PauseAt string
	// Registry takes the controller's metrics; nil: a registry of its own.
	Registry *prometheus.Registry
	// TargetInterval is how often the leader reads every node's first-level fence
	// device (kubefence_target_up); zero means devicemonitor.DefaultInterval.
	TargetInterval time.Duration
}

// Controller detects unhealthy nodes and drives their fencing incidents.
type Controller struct {
	opts        Options
	cfg         *v1alpha1.Config
	client      kubernetes.Interface
	nodes       corelisters.NodeLister
	pods        cache.SharedIndexInformer
	pdbs        policylisters.PodDisruptionBudgetLister
	attachments storagelisters.VolumeAttachmentLister
	synced      []cache.InformerSynced
	store       *incidents.Store
	detector    *detector.Detector
	caller      *agentcall.Caller
	remedy      *remediate.Remediator
	queue       workqueue.TypedRateLimitingInterface[string]
	metrics     *metrics
	recorder    record.EventRecorder
	now         func() time.Time

	kubeInformers informers.SharedInformerFactory
	leaseInformer informers.SharedInformerFactory
	idInformer    informers.SharedInformerFactory
	nfInformer    fencinginformers.SharedInformerFactory
	replicas      *leader.Replicas
	pause         *pauser
	// reportInformer follows the node agents' reports into watchdogs; nil when no policy
	// has a watchdog level and heartbeats are off.
	reportInformer informers.SharedInformerFactory
	watchdogs      *watchdogs
	// heartbeats is this replica's seat among the agents' peers; nil when off.
	heartbeats *heartbeats
	// requests carries health checkers' KubefenceRemediations; nil when off.
	requests *requests.Requests
	// nodeLeases reads node Leases live before incidents open, shared among them.
	nodeLeases *coalesce.Batch[string, *coordinationv1.Lease]

	// guard checks the Lease before irreversible actions; nil without leader election.
	guard *leader.LeaseGuard
	// admission makes each fence decision and its claim on the budget one step.
	admission admission
	// gate lets a storm's releases go before their records.
	gate releaseGate
	// monitor reads every node's fence devices (leader only).
	monitor *devicemonitor.Monitor
	// orphans repairs what a dead predecessor left behind (leader only).
	orphans *orphans.Repair

	mu    sync.Mutex
	epoch int64
	// dryRunSeen holds, per node, the unhealthy episodes (keyed by when their evidence
	// started) already reported in dry run. A node's entry goes once it is healthy again
	// or deleted (forgetDryRun), so the map holds only nodes that are unhealthy now.
	dryRunSeen map[string]map[string]bool
	// pendingEvents are the events of each incident waiting for its next save.
	pendingEvents map[string][]pendingEvent
	// apiUnreachable is set when a read of a node Lease failed: the API server may be
	// down, and with it every kubelet's renewals (see confirmStale).
	apiUnreachable atomic.Bool
}

// DefaultWorkers is how many nodes are synced at once by default. A worker stays with an
// incident through its API writes and the agent's Fence call, so this bounds how many
// incidents progress at once: with 16, a hundred nodes failing together were opened in
// waves, the last ones 1.9 s after they crossed their threshold (BenchmarkIncidentCost,
// then BenchmarkIncidentOverhead, on 2 cores; 13 ms with 100). An idle worker is a
// goroutine waiting on the queue.
const DefaultWorkers = 100

// New builds a controller; Run starts it.
func New(opts Options) (*Controller, error) {
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 250 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.IdentityRenewInterval <= 0 {
		opts.IdentityRenewInterval = 10 * time.Second
	}
	cfg := opts.Config
	c := &Controller{
		opts: opts, cfg: cfg, client: opts.Client, now: opts.Now, recorder: opts.Recorder, guard: opts.Guard,
		metrics: newMetrics(opts.Registry),
		detector: detector.New(detector.Thresholds{
			LeaseStaleAfter:       cfg.Detection.LeaseStaleAfter.Duration,
			NotReadyAfter:         cfg.Detection.NotReadyAfter.Duration,
			ExpectedRenewInterval: cfg.Detection.ExpectedRenewInterval.Duration,
			FlapWindow:            cfg.Detection.FlapWindow.Duration,
			FlapThreshold:         int(cfg.Detection.FlapThreshold),
			Heartbeats:            cfg.Heartbeats != nil,
		}),
		replicas:      leader.NewReplicas(opts.NodeName, opts.IdentityRenewInterval),
		pause:         &pauser{point: opts.PauseAt},
		dryRunSeen:    map[string]map[string]bool{},
		pendingEvents: map[string][]pendingEvent{},
		// Per-node exponential backoff only: the default's cluster-wide 10 per second
		// bucket would queue a hundred simultaneous incidents behind each other.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubefence"}),
	}
	names := make([]string, 0, len(cfg.Agents))
	for _, a := range cfg.Agents {
		names = append(names, a.Name)
	}
	c.metrics.initCounters()
	// The agents read the controller's clock as it is at each call: a test that swaps it
	// swaps theirs too.
	var err error
	c.caller, err = agentcall.New(opts.Agents, cfg, opts.Client, agentcall.NewMetrics(c.metrics.registry, names), func() time.Time { return c.now() },
		func() ([]*corev1.Node, error) { return c.nodes.List(everything()) })
	if err != nil {
		return nil, err
	}
	c.nodeLeases = detector.LeaseReads(opts.Client)
	c.remedy = &remediate.Remediator{Client: opts.Client, Attachments: remediate.SharedAttachments(opts.Client), Pods: c.podsOn,
		CachedAttachments: func() []*storagev1.VolumeAttachment {
			vas, _ := c.attachments.List(everything()) // a cache read fails only on a selector it cannot use
			return vas
		},
		Node: func(name string) (*corev1.Node, bool) {
			n, err := c.nodes.Get(name)
			if err != nil {
				return nil, false
			}
			return n.DeepCopy(), true
		}}
	c.watchdogs = newWatchdogs(cfg.Watchdog, func() time.Time { return c.now() })
	if cfg.Heartbeats != nil {
		c.heartbeats = newHeartbeats(cfg.Heartbeats, c.metrics.registry)
	}
	c.metrics.identity.WithLabelValues(opts.Identity).Set(1)
	if err := c.newCaches(opts); err != nil {
		return nil, err
	}
	c.orphans = orphans.New(orphans.Repair{Nodes: c.nodes, Incidents: c.store, Remedy: c.remedy, Record: incidentRecord{c},
		Check: c.checkLease, Confirmed: c.leaseConfirmed}, c.metrics.registry)
	c.monitor = devicemonitor.New(devicemonitor.Monitor{Checker: c.caller, Policies: cfg.Policies, Nodes: c.nodes, Client: opts.Client,
		LastLife: c.detector.LastLife, Confirm: c.leaseConfirmed, Recorder: opts.Recorder, Interval: opts.TargetInterval},
		c.metrics.registry, cfg.Detection.ExpectedRenewInterval.Duration)
	return c, nil
}

// newCaches sets up the informer caches the controller reads, and their handlers.
func (c *Controller) newCaches(opts Options) error {
	cfg := opts.Config
	c.kubeInformers = informers.NewSharedInformerFactory(opts.Client, 10*time.Minute)
	c.leaseInformer = informers.NewSharedInformerFactoryWithOptions(opts.Client, 10*time.Minute,
		informers.WithNamespace(NodeLeaseNamespace))
	c.nfInformer = fencinginformers.NewSharedInformerFactory(opts.Fencing, 10*time.Minute)
	c.idInformer = informers.NewSharedInformerFactoryWithOptions(opts.Client, 10*time.Minute,
		informers.WithNamespace(cfg.LeaderElection.Namespace), informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = leader.IdentityLabel + "=true," + leader.ComponentLabel + "=controller"
		}))

	nodeInf := c.kubeInformers.Core().V1().Nodes()
	leaseInf := c.leaseInformer.Coordination().V1().Leases()
	podInf := c.kubeInformers.Core().V1().Pods()
	pdbInf := c.kubeInformers.Policy().V1().PodDisruptionBudgets()
	vaInf := c.kubeInformers.Storage().V1().VolumeAttachments()
	// Caches of every node, lease and pod are the controller's memory; drop what it never reads.
	for _, inf := range []cache.SharedIndexInformer{nodeInf.Informer(), leaseInf.Informer(), podInf.Informer()} {
		if err := inf.SetTransform(detector.TrimForCache); err != nil {
			return fmt.Errorf("trim cache: %w", err)
		}
	}
	if err := podInf.Informer().AddIndexers(cache.Indexers{podsByNodeIndex: podsByNode}); err != nil {
		return fmt.Errorf("index pods: %w", err)
	}
	c.pods, c.pdbs, c.attachments = podInf.Informer(), pdbInf.Lister(), vaInf.Lister()
	nfInf := c.nfInformer.Fencing().V1alpha1().NodeFences()
	if err := c.caller.Index(nodeInf.Informer()); err != nil {
		return err
	}
	c.nodes = nodeInf.Lister()
	var err error
	if c.store, err = incidents.New(opts.Fencing.FencingV1alpha1().NodeFences(), nfInf.Informer()); err != nil {
		return err
	}
	idInf := c.idInformer.Coordination().V1().Leases().Informer()
	c.synced = []cache.InformerSynced{nodeInf.Informer().HasSynced, leaseInf.Informer().HasSynced, nfInf.Informer().HasSynced,
		podInf.Informer().HasSynced, pdbInf.Informer().HasSynced, vaInf.Informer().HasSynced, idInf.HasSynced}
	if usesWatchdog(cfg) || cfg.Heartbeats != nil {
		if err := c.watchReports(opts); err != nil {
			return err
		}
	}
	if cfg.ExternalRemediation.Enabled {
		var err error
		c.requests, err = requests.New(requests.Options{Informer: c.nfInformer.Fencing().V1alpha1().KubefenceRemediations(),
			Fencing: opts.Fencing, Machines: opts.Dynamic, Nodes: c.nodes, Policies: cfg.Policies, Incidents: incidentsOf{c},
			EnqueueNode: func(node string) { c.queue.Add(node) }, Confirm: c.checkLease})
		if err != nil {
			return err
		}
		c.synced = append(c.synced, c.requests.Synced)
	}
	return c.watch(nodeInf.Informer(), leaseInf.Informer(), nfInf.Informer(), idInf)
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
func (c *Controller) watchReports(opts Options) error {
	c.reportInformer = informers.NewSharedInformerFactoryWithOptions(opts.Client, 10*time.Minute,
		informers.WithNamespace(c.cfg.Watchdog.Namespace), informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = nodeagent.ComponentLabel + "=" + nodeagent.Component
		}))
	inf := c.reportInformer.Coordination().V1().Leases().Informer()
	c.synced = append(c.synced, inf.HasSynced)
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onReport(obj) },
		UpdateFunc: func(_, obj any) { c.onReport(obj) },
		DeleteFunc: func(obj any) {
			if l, ok := unwrapDeleted(obj).(*coordinationv1.Lease); ok {
				c.watchdogs.forget("", nodeagent.NodeOf(l))
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
	holds := c.watchdogs.observe(l)
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
				c.replicas.Forget(l.Name)
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
				c.admission.unclaim(nf.Name)
				c.watchdogs.forget(nf.Name, "")
			}
		},
	}); err != nil {
		return fmt.Errorf("watch incidents: %w", err)
	}
	return nil
}

// Config is the configuration the controller runs with.
func (c *Controller) Config() *v1alpha1.Config { return c.cfg }

// Registry is the controller's metrics registry, for the HTTP server.
func (c *Controller) Registry() *prometheus.Registry { return c.metrics.registry }

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
		c.replicas.Observe(l, c.now())
	}
}

func (c *Controller) onNodeFence(obj any) {
	if nf, ok := obj.(*v1alpha1.NodeFence); ok && nf.Spec.NodeName != "" {
		c.queue.Add(nf.Spec.NodeName)
		c.requests.OnIncident(nf)
	}
}

// StartInformers starts the caches; standbys run them too so a takeover starts warm.
func (c *Controller) StartInformers(ctx context.Context) error {
	c.kubeInformers.Start(ctx.Done())
	c.leaseInformer.Start(ctx.Done())
	c.idInformer.Start(ctx.Done())
	c.nfInformer.Start(ctx.Done())
	if c.reportInformer != nil {
		c.reportInformer.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("informer caches did not sync")
	}
	if c.heartbeats != nil {
		return c.startHeartbeats(ctx)
	}
	return nil
}

// Run acts as leader with the given fencing epoch until ctx ends.
func (c *Controller) Run(ctx context.Context, epoch int64) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.mu.Lock()
	c.epoch = epoch
	c.mu.Unlock()
	c.metrics.leader.Set(1)
	// Open incidents resume from their status; new ones need evidence gathered while this
	// replica leads (see Detector.RestartClocks).
	c.detector.RestartClocks(c.now())
	klog.FromContext(ctx).Info("Acting as leader", "identity", c.opts.Identity, "epoch", epoch)
	// A cache read fails only on a selector it cannot use; the resync below enqueues
	// every node again within seconds anyway.
	nodes, err := c.nodes.List(everything())
	if err == nil {
		for _, n := range nodes {
			c.queue.Add(n.Name)
		}
	}
	for range c.opts.Workers {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	// Every fence device is read now and then regularly, as Pacemaker's monitor does.
	go c.monitor.Run(ctx)
	// At take-over and then regularly, find what a dead predecessor left behind.
	go c.orphans.Run(ctx)
	if c.requests != nil {
		go c.requests.Run(ctx)
	}
	// Ended incidents are kept as history, within the configured retention.
	retention := &incidents.Retention{Store: c.store, History: c.cfg.History, Confirm: c.checkLease, Now: c.now}
	go retention.Run(ctx)
	// Leases that stop changing produce no events: look at every node regularly.
	go wait.UntilWithContext(ctx, func(context.Context) {
		nodes, err := c.nodes.List(everything())
		if err != nil {
			return // a cache read; the next round tries again
		}
		for _, n := range nodes {
			c.queue.Add(n.Name)
		}
		c.refreshUnhealthy(c.now())
	}, 5*time.Second)
	<-ctx.Done()
}

func (c *Controller) currentEpoch() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
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

// incidentsOf is the incident record as the requests read it: the store, and the node's
// open incident as the loop drives it.
type incidentsOf struct{ c *Controller }

func (i incidentsOf) Get(name string) *v1alpha1.NodeFence           { return i.c.store.Get(name) }
func (i incidentsOf) Open(node string) (*v1alpha1.NodeFence, error) { return i.c.openIncident(node) }

// record is the incident loop's record of an incident (steps, Events held for the save,
// the save at this replica's epoch), for the repairs of closed incidents.
type incidentRecord struct{ c *Controller }

func (r incidentRecord) Step(ctx context.Context, nf *v1alpha1.NodeFence, typ, msg string) {
	r.c.step(ctx, nf, r.c.now(), typ, msg)
}

func (r incidentRecord) Event(node *corev1.Node, nf *v1alpha1.NodeFence, typ, reason, format string, args ...any) {
	r.c.event(node, nf, typ, reason, format, args...)
}

func (r incidentRecord) Save(ctx context.Context, nf *v1alpha1.NodeFence) error {
	return r.c.save(ctx, nf)
}
