package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/caches"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/maintenance"
	"github.com/kubefence/kubefence/pkg/nodeview"
	"github.com/kubefence/kubefence/pkg/oncall"
	"github.com/kubefence/kubefence/pkg/oncall/life"
	"github.com/kubefence/kubefence/pkg/podrelease"
	"github.com/kubefence/kubefence/pkg/requests"
	"github.com/kubefence/kubefence/pkg/selffence"
)

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
	Caller *fencecall.Caller
	// Peers are the other controllers the loop asks; each may be nil (off).
	Peers Peers
	// Registry takes the loop's metrics; nil: a registry of its own.
	Registry *prometheus.Registry
	// Identity names this replica (hostname_PID_suffix).
	Identity string
	// Shared are what the loop and its peers all use, made by pkg/app below them.
	Shared Shared
	// Leader is this replica's place among the replicas.
	Leader LeaderOptions
	// Tuning are the loop's knobs, each with a default.
	Tuning Tuning
}

// Peers are the controllers whose state the loop asks about, through their methods.
type Peers struct {
	// Health knows which remote agents do not answer; nil: every agent is taken as up.
	Health *fencecall.Health
	// Requests carries the health checkers' KubefenceRemediations; nil when off.
	Requests *requests.Requests
	// Agents is the watch on the node agents (pkg/nodeagentwatch); required.
	Agents NodeAgentWatch
	// Maintenance finds the Machines and NodeMaintenances that name a node; nil reads
	// only what the Node says.
	Maintenance *maintenance.Reader
	// Pauses are the standing pause requests; nil: only the configuration pauses.
	Pauses *oncall.Pauses
}

// NodeAgentWatch is what the loop asks of the watch on the node agents: their heartbeats'
// verdict on a node's agent, a probe of its kubelet, the watchdog level's verdict, and the
// signs of a node's life that a person's confirm-off is refused on.
type NodeAgentWatch interface {
	// ObserveAgent passes to the detector whether node's agent is gone.
	ObserveAgent(node string)
	// ProbeKubelet probes node's kubelet for the detector; false when heartbeats are off.
	ProbeKubelet(ctx context.Context, node *corev1.Node, now time.Time) bool
	// Verdict says where the watchdog level's fence of node in nf stands.
	Verdict(nf *v1alpha1.NodeFence, node *corev1.Node, issued bool) (selffence.Verdict, error)
	// Signs are the node agent's and kubelet's signs of node's life at now, for a word.
	Signs(node string, now time.Time) life.Signs
}

// Shared are what the loop and its peers all use, made once by pkg/app, below them all,
// and handed down to each: none of them asks another controller for these.
type Shared struct {
	// Now is the process's one clock.
	Now func() time.Time
	// Guard is this replica's standing as leader: the epoch every write carries, the
	// Lease check before every irreversible action, the confirmation before every other
	// write; it stops a deposed replica.
	Guard *leader.Guard
	// Record writes the incidents: timeline steps, Events held until the save, the save
	// at the Guard's epoch.
	Record *incidents.Recorder
	// Queue is the loop's queue of nodes to look at (NewQueue); peers add nodes to it.
	// The loop shuts it down when it stops leading.
	Queue workqueue.TypedRateLimitingInterface[string]
	// Releaser releases and undoes a node's workloads (podrelease.OnCaches); the orphan
	// repair shares it.
	Releaser *podrelease.Releaser
	// Admission makes each fence decision and its claim on the budget one step; Record
	// counts its fences to tell a storm (incidents.Recorder.Fencing).
	Admission *nodeview.Admission
}

// LeaderOptions say how this replica leads.
type LeaderOptions struct {
	// Reach is this replica's record of reaching the API server (leader.Reach): on
	// takeover, the Lease silences it watched while it stood by count from the start of
	// its unbroken reach. Nil (no leader election, or unknown) counts them from the
	// takeover.
	Reach *leader.Reach
	// NodeName is the node this replica runs on (the downward API's spec.nodeName);
	// empty outside a pod. It is never fenced by this replica.
	NodeName string
	// IdentityRenewInterval is how often replicas renew their identity Leases; a node
	// whose replica renewed within three of them is alive and never fenced. Default 5s.
	IdentityRenewInterval time.Duration
}

// Tuning are the loop's knobs.
type Tuning struct {
	// Workers is how many nodes are synced at once; zero means DefaultWorkers.
	Workers int
	// PollInterval is how often a fenced state is read back while verifying.
	PollInterval time.Duration
	// PauseAt names a test pause point (testpoint.Env); empty in production.
	PauseAt string
}

// DefaultWorkers is how many nodes are synced at once by default. A worker stays with an
// incident through its API writes and the agent's Fence call, so this bounds how many
// incidents progress at once: with 16, a hundred nodes failing together were opened in
// waves, the last ones 1.9 s after they crossed their threshold (BenchmarkIncidentCost,
// then BenchmarkIncidentOverhead, on 2 cores; 13 ms with 100). An idle worker is a
// goroutine waiting on the queue.
const DefaultWorkers = 100
