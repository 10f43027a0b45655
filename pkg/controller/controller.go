package controller

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/coalesce"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/loopmetrics"
	"github.com/kubefence/kubefence/pkg/maintenance"
	"github.com/kubefence/kubefence/pkg/nodeview"
	"github.com/kubefence/kubefence/pkg/oncall"
	"github.com/kubefence/kubefence/pkg/podrelease"
	"github.com/kubefence/kubefence/pkg/releasegate"
	"github.com/kubefence/kubefence/pkg/requests"
	"github.com/kubefence/kubefence/pkg/testpoint"
)

// NodeLeaseNamespace is where kubelets keep their heartbeat Leases.
const NodeLeaseNamespace = detector.LeaseNamespace

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
	caller   *fencecall.Caller
	releaser *podrelease.Releaser
	queue    workqueue.TypedRateLimitingInterface[string]
	metrics  *loopmetrics.Metrics
	now      func() time.Time
	peers    peers
	lead     leadership
	record   *incidents.Recorder
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
	health   *fencecall.Health
	requests *requests.Requests
	pauses   *oncall.Pauses
	replicas *leader.Replicas
	agents   NodeAgentWatch
	// maintenance says which nodes were taken out on purpose.
	maintenance *maintenance.Reader
}

// leadership is this replica's standing as leader (the guard pkg/app shares with every
// controller) and the tests' pause points on the way to an irreversible action.
type leadership struct {
	guard *leader.Guard
	pause *testpoint.Pauser
}

// decisions are what a decision shares with the others.
type decisions struct {
	// admission makes each fence decision and its claim on the budget one step
	// (Shared.Admission).
	admission *nodeview.Admission
	// gate lets a storm's releases go before their records.
	gate releasegate.Gate
	// dryRunReports report each unhealthy episode of a node once in dry run.
	dryRunReports nodeview.DryRunReports
}

// NewQueue is the incident loop's queue of nodes to look at, which pkg/app makes before
// the loop and its peers that add to it. Per-node exponential backoff only: the
// default's cluster-wide 10 per second bucket would queue a hundred simultaneous
// incidents behind each other.
func NewQueue() workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubefence"})
}
