package requests

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	fencinginformers "github.com/kubefence/kubefence/pkg/generated/informers/externalversions/fencing/v1alpha1"
	corelisters "k8s.io/client-go/listers/core/v1"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/caches/tombstone"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	fencinglisters "github.com/kubefence/kubefence/pkg/generated/listers/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/healthcheck"
	"github.com/kubefence/kubefence/pkg/policy"
)

// Requests carries the health checkers' KubefenceRemediations (config
// externalRemediation): each is answered by a NodeFence the node's sync opens for it, or
// by the node's open one, and shows its progress in the conditions NodeHealthCheck reads.
// Only the leader acts on them (Run).
type Requests struct {
	lister   fencinglisters.KubefenceRemediationLister
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	o        Options

	mu sync.Mutex
	// wanted maps a node to the request (namespace/name) its sync is to open an incident
	// for.
	wanted map[string]string
}

// Incidents are the incident record as the requests read it.
type Incidents interface {
	// Get is the named incident, nil when there is none.
	Get(name string) *v1alpha1.NodeFence
	// Open is node's open incident (the oldest, should there be two), nil when none.
	Open(node string) (*v1alpha1.NodeFence, error)
}

// Options are what the requests need from the process that wires them.
type Options struct {
	// Informer is the shared informer of KubefenceRemediations.
	Informer fencinginformers.KubefenceRemediationInformer
	// Fencing writes the requests' status and reads a request live.
	Fencing versioned.Interface
	// Machines reads Cluster API Machines, for MachineHealthCheck's requests; may be nil.
	Machines  dynamic.Interface
	Nodes     corelisters.NodeLister
	Policies  []v1alpha1.Policy
	Incidents Incidents
	// Queue is the incident loop's queue of nodes to look at.
	Queue Queue
	// Confirm passes while this replica leads (a Lease check); no status is written
	// while it fails.
	Confirm func(ctx context.Context) error
}

// Queue is the incident loop's queue of nodes to look at, made by pkg/app before the
// loop and the requests: a request asks the loop to sync its node by adding it.
type Queue interface{ Add(node string) }

// requestsByNodeFence indexes requests by the NodeFence that carries them.
const requestsByNodeFence = "nodeFence"

// Recheck is how often a request whose incident is open is looked at again,
// besides the NodeFence's own events.
const Recheck = 30 * time.Second

// New registers the requests on their informer.
func New(o Options) (*Requests, error) {
	r := &Requests{lister: o.Informer.Lister(), informer: o.Informer.Informer(), o: o, wanted: map[string]string{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubefence-requests"})}
	if err := r.informer.AddIndexers(cache.Indexers{requestsByNodeFence: func(obj any) ([]string, error) {
		if kr, ok := obj.(*v1alpha1.KubefenceRemediation); ok && kr.Status.NodeFence != "" {
			return []string{kr.Status.NodeFence}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("index remediation requests: %w", err)
	}
	_, err := r.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.onRequest(obj) },
		UpdateFunc: func(_, obj any) { r.onRequest(obj) },
		// A deleted request's incident, if it has not called an agent, is cancelled by its
		// node's sync (Withdrawn).
		DeleteFunc: func(obj any) { r.onRequest(tombstone.Unwrap(obj)) },
	})
	if err != nil {
		return nil, fmt.Errorf("watch remediation requests: %w", err)
	}
	return r, nil
}

// Synced reports whether the requests' cache has synced.
func (r *Requests) Synced() bool { return r.informer.HasSynced() }

func (r *Requests) onRequest(obj any) {
	kr, ok := obj.(*v1alpha1.KubefenceRemediation)
	if !ok {
		return
	}
	r.queue.Add(healthcheck.Key(kr))
	if kr.Status.NodeName != "" {
		r.o.Queue.Add(kr.Status.NodeName)
	}
}

// OnIncident queues the requests an incident carries: it changed.
func (r *Requests) OnIncident(nf *v1alpha1.NodeFence) {
	if r == nil {
		return
	}
	if key := nf.Annotations[v1alpha1.RemediationAnnotation]; key != "" {
		r.queue.Add(key)
	}
	objs, err := r.informer.GetIndexer().ByIndex(requestsByNodeFence, nf.Name)
	if err != nil {
		return
	}
	for _, obj := range objs {
		if kr, ok := obj.(*v1alpha1.KubefenceRemediation); ok {
			r.queue.Add(healthcheck.Key(kr))
		}
	}
}

// Run works the requests until ctx ends; every request is looked at first. Only the
// leader runs it.
func (r *Requests) Run(ctx context.Context) {
	defer r.queue.ShutDown()
	if all, err := r.lister.List(labels.Everything()); err == nil {
		for _, kr := range all {
			r.queue.Add(healthcheck.Key(kr))
		}
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for r.processNext(ctx) {
		}
	}, time.Second)
	<-ctx.Done()
}

func (r *Requests) processNext(ctx context.Context) bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	requeue, err := r.Sync(ctx, key)
	switch {
	case err != nil:
		utilruntime.HandleErrorWithContext(ctx, err, "Remediation request failed", "request", key)
		r.queue.AddRateLimited(key)
	case requeue > 0:
		r.queue.Forget(key)
		r.queue.AddAfter(key, requeue)
	default:
		r.queue.Forget(key)
	}
	return true
}

// Sync carries one request: it finds the node, opens or joins the node's incident, and
// writes the request's status from it. It returns when to look again.
func (r *Requests) Sync(ctx context.Context, key string) (time.Duration, error) {
	ctx = klog.NewContext(ctx, klog.LoggerWithValues(klog.FromContext(ctx), "request", key))
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, err
	}
	kr, err := r.lister.KubefenceRemediations(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil // its incident, if any, is the node's sync's (Withdrawn)
	}
	if err != nil || kr.DeletionTimestamp != nil {
		return 0, err
	}
	node, problem, err := r.node(ctx, kr)
	if err != nil {
		return 0, err
	}
	var nf *v1alpha1.NodeFence
	if problem == nil {
		if nf, err = r.incident(kr, node); err != nil {
			return 0, err
		}
	}
	st := healthcheck.Mirror(kr, node, nf, problem)
	if !apiequality.Semantic.DeepEqual(st, kr.Status) {
		if err := r.o.Confirm(ctx); err != nil {
			return 0, err
		}
		out := kr.DeepCopy()
		out.Status = st
		if _, err := r.o.Fencing.FencingV1alpha1().KubefenceRemediations(ns).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
			return 0, fmt.Errorf("write status of KubefenceRemediation %s: %w", key, err)
		}
		klog.FromContext(ctx).V(2).Info("Remediation request status", "node", node, "phase", st.Phase, "nodeFence", st.NodeFence)
	}
	if nf != nil && nf.Status.Phase.Open() {
		return Recheck, nil
	}
	return 0, nil
}

// node is the node kr names, or the problem that leaves it without one.
func (r *Requests) node(ctx context.Context, kr *v1alpha1.KubefenceRemediation) (string, *healthcheck.Problem, error) {
	t := healthcheck.TargetOf(kr)
	node := t.Node
	if t.Machine != nil {
		if r.o.Machines == nil {
			return "", &healthcheck.Problem{Reason: "NoMachineClient", Message: "this controller cannot read Machines"}, nil
		}
		m := *t.Machine
		u, err := r.o.Machines.Resource(m.Resource()).Namespace(m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", &healthcheck.Problem{Reason: "MachineNotFound", Message: m.String() + " not found"}, nil
		}
		if err != nil {
			return "", nil, fmt.Errorf("get %s: %w", m, err)
		}
		if node, err = healthcheck.MachineNode(m, u); err != nil {
			return "", &healthcheck.Problem{Reason: "MachineHasNoNode", Message: err.Error()}, nil
		}
	}
	n, err := r.o.Nodes.Get(node)
	if apierrors.IsNotFound(err) {
		return node, &healthcheck.Problem{Reason: "NodeNotFound", Message: fmt.Sprintf("node %s not found", node)}, nil
	}
	if err != nil {
		return "", nil, err
	}
	pol, err := policy.Select(r.o.Policies, n.Labels)
	if err != nil {
		return node, nil, fmt.Errorf("node %s: %w", node, err)
	}
	if pol == nil {
		return node, &healthcheck.Problem{Reason: "NoPolicy", Message: fmt.Sprintf("no kubefence policy governs node %s", node)}, nil
	}
	return node, nil, nil
}

// incident is the incident that carries kr: the one it names while that stands,
// else the node's open incident. With neither, the node's own sync is asked to open one
// for kr (want): incidents of a node are opened by its sync alone, one at a time, so a
// request and the node's own detection never open two. A request that timed out opens
// nothing.
func (r *Requests) incident(kr *v1alpha1.KubefenceRemediation, node string) (*v1alpha1.NodeFence, error) {
	if nf := r.Carrier(kr); nf != nil {
		return nf, nil
	}
	if kr.Annotations[v1alpha1.RemediationTimedOutAnnotation] != "" {
		return nil, nil
	}
	open, err := r.o.Incidents.Open(node)
	if err != nil || open != nil {
		return open, err
	}
	r.want(node, healthcheck.Key(kr))
	r.o.Queue.Add(node)
	return nil, nil
}

// Carrier is the incident kr's status names while it answers kr, else nil. An incident
// of the node's own detection that a sign of life cancelled does not answer the request;
// one opened for it and cancelled (it was withdrawn) does.
func (r *Requests) Carrier(kr *v1alpha1.KubefenceRemediation) *v1alpha1.NodeFence {
	name := kr.Status.NodeFence
	if name == "" {
		return nil
	}
	if nf := r.o.Incidents.Get(name); nf != nil && (nf.Status.Phase != v1alpha1.PhaseCancelled || healthcheck.Carries(nf, kr)) {
		return nf
	}
	return nil
}

// want asks node's sync to open an incident for the request with this key.
func (r *Requests) want(node, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wanted[node] = key
}

// Wanted is the request a node's sync is asked to open an incident for, or "".
func (r *Requests) Wanted(node string) string {
	if r == nil {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wanted[node]
}

// ToOpen is the request node's sync is asked to open an incident for (Wanted), with its
// key, while it stands and nothing answers it yet; nil when there is none. A want that
// needs no incident any more ends here: its request gone or withdrawn (Done), or carried
// by an incident already, one that ended too (Answered): a request whose node was fenced
// and recovered must not fence it again while the health checker waits to see it healthy
// and delete the request.
func (r *Requests) ToOpen(node string) (*v1alpha1.KubefenceRemediation, string, error) {
	key := r.Wanted(node)
	if key == "" {
		return nil, "", nil
	}
	kr, err := r.Lookup(key)
	switch {
	case err != nil:
		r.Done(node, key)
		return nil, "", err
	case kr == nil || healthcheck.Withdrawn(kr, string(kr.UID)) != "":
		r.Done(node, key)
		return nil, "", nil
	case r.Carrier(kr) != nil:
		r.Answered(node, key)
		return nil, "", nil
	}
	return kr, key, nil
}

// Joined answers node's want, if any, with the node's open incident: a request that
// asked for an incident while that one was not in the loop's cache yet joins it, and its
// ask must not outlive it and open another once it ends.
func (r *Requests) Joined(node string) {
	if key := r.Wanted(node); key != "" {
		r.Answered(node, key)
	}
}

// Answered drops node's want for key and queues the request, to read what answers it.
func (r *Requests) Answered(node, key string) {
	r.Done(node, key)
	r.queue.Add(key)
}

// Done drops node's want when it is still key's.
func (r *Requests) Done(node, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wanted[node] == key {
		delete(r.wanted, node)
	}
}

// Withdrawn says why the remediation request nf was opened for no longer stands
// ("" while it does, or when nf was not opened for one). live reads the request from
// the API server, as before an agent is called; otherwise the cache is enough.
func (r *Requests) Withdrawn(ctx context.Context, nf *v1alpha1.NodeFence, live bool) (string, error) {
	key := nf.Annotations[v1alpha1.RemediationAnnotation]
	if r == nil || !IsRequest(nf) {
		return "", nil
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return "", fmt.Errorf("incident %s: annotation %s: %w", nf.Name, v1alpha1.RemediationAnnotation, err)
	}
	var kr *v1alpha1.KubefenceRemediation
	if live {
		kr, err = r.o.Fencing.FencingV1alpha1().KubefenceRemediations(ns).Get(ctx, name, metav1.GetOptions{})
	} else {
		kr, err = r.lister.KubefenceRemediations(ns).Get(name)
	}
	switch {
	case apierrors.IsNotFound(err):
		kr = nil
	case err != nil:
		return "", fmt.Errorf("incident %s: read KubefenceRemediation %s: %w", nf.Name, key, err)
	}
	why := healthcheck.Withdrawn(kr, nf.Labels[v1alpha1.RemediationUIDLabel])
	if why != "" {
		why = fmt.Sprintf("%s (%s)", why, key)
	}
	return why, nil
}

// Lookup is the request key names, from the cache; nil when there is none.
func (r *Requests) Lookup(key string) (*v1alpha1.KubefenceRemediation, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, err
	}
	kr, err := r.lister.KubefenceRemediations(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return kr, err
}

// Queue asks Run to look at the request key again.
func (r *Requests) Queue(key string) { r.queue.Add(key) }

// IsRequest reports whether nf was opened for a remediation request.
func IsRequest(nf *v1alpha1.NodeFence) bool {
	return strings.HasPrefix(nf.Spec.RequestedBy, v1alpha1.RequestedByRemediationPrefix) &&
		nf.Annotations[v1alpha1.RemediationAnnotation] != ""
}
