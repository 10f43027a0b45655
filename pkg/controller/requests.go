package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	fencinglisters "github.com/kubefence/kubefence/pkg/generated/listers/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/healthcheck"
	"github.com/kubefence/kubefence/pkg/policy"
)

// requests carries the health checkers' KubefenceRemediations (config
// externalRemediation): each opens a NodeFence, or joins the node's open one, and shows
// its progress in the conditions NodeHealthCheck reads. Only the leader acts on them.
type requests struct {
	lister   fencinglisters.KubefenceRemediationLister
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	// machines reads Cluster API Machines, for MachineHealthCheck's requests.
	machines dynamic.Interface

	mu sync.Mutex
	// wanted maps a node to the request (namespace/name) its sync is to open an incident
	// for.
	wanted map[string]string
}

// requestsByNodeFence indexes requests by the NodeFence that carries them.
const requestsByNodeFence = "nodeFence"

// requestRecheck is how often a request whose incident is open is looked at again,
// besides the NodeFence's own events.
const requestRecheck = 30 * time.Second

func (c *Controller) watchRequests(opts Options) error {
	inf := c.nfInformer.Fencing().V1alpha1().KubefenceRemediations()
	r := &requests{lister: inf.Lister(), informer: inf.Informer(), machines: opts.Dynamic, wanted: map[string]string{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubefence-requests"})}
	if err := r.informer.AddIndexers(cache.Indexers{requestsByNodeFence: func(obj any) ([]string, error) {
		if kr, ok := obj.(*v1alpha1.KubefenceRemediation); ok && kr.Status.NodeFence != "" {
			return []string{kr.Status.NodeFence}, nil
		}
		return nil, nil
	}}); err != nil {
		return fmt.Errorf("index remediation requests: %w", err)
	}
	_, err := r.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onRequest(obj) },
		UpdateFunc: func(_, obj any) { c.onRequest(obj) },
		// A deleted request's incident, if it has not called an agent, is cancelled by its
		// node's sync (requestWithdrawn).
		DeleteFunc: func(obj any) { c.onRequest(unwrapDeleted(obj)) },
	})
	if err != nil {
		return fmt.Errorf("watch remediation requests: %w", err)
	}
	c.requests = r
	c.synced = append(c.synced, r.informer.HasSynced)
	return nil
}

func (c *Controller) onRequest(obj any) {
	kr, ok := obj.(*v1alpha1.KubefenceRemediation)
	if !ok {
		return
	}
	c.requests.queue.Add(healthcheck.Key(kr))
	if kr.Status.NodeName != "" {
		c.queue.Add(kr.Status.NodeName)
	}
}

// onRequestIncident enqueues the requests an incident carries.
func (c *Controller) onRequestIncident(nf *v1alpha1.NodeFence) {
	if c.requests == nil {
		return
	}
	if key := nf.Annotations[v1alpha1.RemediationAnnotation]; key != "" {
		c.requests.queue.Add(key)
	}
	objs, err := c.requests.informer.GetIndexer().ByIndex(requestsByNodeFence, nf.Name)
	if err != nil {
		return
	}
	for _, obj := range objs {
		if kr, ok := obj.(*v1alpha1.KubefenceRemediation); ok {
			c.requests.queue.Add(healthcheck.Key(kr))
		}
	}
}

// runRequests works the requests until ctx ends; every request is looked at first.
func (c *Controller) runRequests(ctx context.Context) {
	defer c.requests.queue.ShutDown()
	if all, err := c.requests.lister.List(everything()); err == nil {
		for _, kr := range all {
			c.requests.queue.Add(healthcheck.Key(kr))
		}
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for c.processRequest(ctx) {
		}
	}, time.Second)
	<-ctx.Done()
}

func (c *Controller) processRequest(ctx context.Context) bool {
	key, quit := c.requests.queue.Get()
	if quit {
		return false
	}
	defer c.requests.queue.Done(key)
	requeue, err := c.syncRequest(ctx, key)
	switch {
	case err != nil:
		utilruntime.HandleErrorWithContext(ctx, err, "Remediation request failed", "request", key)
		c.requests.queue.AddRateLimited(key)
	case requeue > 0:
		c.requests.queue.Forget(key)
		c.requests.queue.AddAfter(key, requeue)
	default:
		c.requests.queue.Forget(key)
	}
	return true
}

// syncRequest carries one request: it finds the node, opens or joins the node's
// incident, and writes the request's status from it.
func (c *Controller) syncRequest(ctx context.Context, key string) (time.Duration, error) {
	ctx = withLogValues(ctx, "request", key)
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, err
	}
	kr, err := c.requests.lister.KubefenceRemediations(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil // its incident, if any, is the node's sync's (requestWithdrawn)
	}
	if err != nil || kr.DeletionTimestamp != nil {
		return 0, err
	}
	node, problem, err := c.requestNode(ctx, kr)
	if err != nil {
		return 0, err
	}
	var nf *v1alpha1.NodeFence
	if problem == nil {
		if nf, err = c.requestIncident(kr, node); err != nil {
			return 0, err
		}
	}
	st := healthcheck.Mirror(kr, node, nf, problem)
	if !apiequality.Semantic.DeepEqual(st, kr.Status) {
		if err := c.checkLease(ctx); err != nil {
			return 0, err
		}
		out := kr.DeepCopy()
		out.Status = st
		if _, err := c.opts.Fencing.FencingV1alpha1().KubefenceRemediations(ns).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
			return 0, fmt.Errorf("write status of KubefenceRemediation %s: %w", key, err)
		}
		klog.FromContext(ctx).V(2).Info("Remediation request status", "node", node, "phase", st.Phase, "nodeFence", st.NodeFence)
	}
	if nf != nil && nf.Status.Phase.Open() {
		return requestRecheck, nil
	}
	return 0, nil
}

// requestNode is the node kr names, or the problem that leaves it without one.
func (c *Controller) requestNode(ctx context.Context, kr *v1alpha1.KubefenceRemediation) (string, *healthcheck.Problem, error) {
	t := healthcheck.TargetOf(kr)
	node := t.Node
	if t.Machine != nil {
		if c.requests.machines == nil {
			return "", &healthcheck.Problem{Reason: "NoMachineClient", Message: "this controller cannot read Machines"}, nil
		}
		m := *t.Machine
		u, err := c.requests.machines.Resource(m.Resource()).Namespace(m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
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
	n, err := c.nodes.Get(node)
	if apierrors.IsNotFound(err) {
		return node, &healthcheck.Problem{Reason: "NodeNotFound", Message: fmt.Sprintf("node %s not found", node)}, nil
	}
	if err != nil {
		return "", nil, err
	}
	pol, err := policy.Select(c.cfg.Policies, n.Labels)
	if err != nil {
		return node, nil, fmt.Errorf("node %s: %w", node, err)
	}
	if pol == nil {
		return node, &healthcheck.Problem{Reason: "NoPolicy", Message: fmt.Sprintf("no kubefence policy governs node %s", node)}, nil
	}
	return node, nil, nil
}

// requestIncident is the incident that carries kr: the one it names while that stands,
// else the node's open incident. With neither, the node's own sync is asked to open one
// for kr (want): incidents of a node are opened by its sync alone, one at a time, so a
// request and the node's own detection never open two. A request that timed out opens
// nothing.
func (c *Controller) requestIncident(kr *v1alpha1.KubefenceRemediation, node string) (*v1alpha1.NodeFence, error) {
	if nf := c.carrier(kr); nf != nil {
		return nf, nil
	}
	if kr.Annotations[v1alpha1.RemediationTimedOutAnnotation] != "" {
		return nil, nil
	}
	open, err := c.openIncident(node)
	if err != nil || open != nil {
		return open, err
	}
	c.requests.want(node, healthcheck.Key(kr))
	c.queue.Add(node)
	return nil, nil
}

// carrier is the incident kr's status names while it answers kr, else nil. An incident
// of the node's own detection that a sign of life cancelled does not answer the request;
// one opened for it and cancelled (it was withdrawn) does.
func (c *Controller) carrier(kr *v1alpha1.KubefenceRemediation) *v1alpha1.NodeFence {
	name := kr.Status.NodeFence
	if name == "" {
		return nil
	}
	if nf := c.store.Get(name); nf != nil && (nf.Status.Phase != v1alpha1.PhaseCancelled || healthcheck.Carries(nf, kr)) {
		return nf
	}
	return nil
}

// want asks node's sync to open an incident for the request with this key.
func (r *requests) want(node, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wanted[node] = key
}

// wantedFor is the request a node's sync is asked to open an incident for, or "".
func (r *requests) wantedFor(node string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wanted[node]
}

// answered drops node's want for key and queues the request, to read what answers it.
func (r *requests) answered(node, key string) {
	r.done(node, key)
	r.queue.Add(key)
}

// done drops node's want when it is still key's.
func (r *requests) done(node, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wanted[node] == key {
		delete(r.wanted, node)
	}
}

// openRequested opens, in node's sync, the incident a request asked for, once the node
// has no open incident: read live from the API server, as before any incident is opened.
// It reports false when there was nothing to open.
func (c *Controller) openRequested(ctx context.Context, node *corev1.Node, pol *v1alpha1.Policy, pn policy.Node, obs detector.Observation) (bool, time.Duration, error) {
	if c.requests == nil || pol == nil {
		// A node no policy governs: the request's own sync says so in its status.
		return false, 0, nil
	}
	key := c.requests.wantedFor(node.Name)
	if key == "" {
		return false, 0, nil
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		c.requests.done(node.Name, key)
		return false, 0, err
	}
	kr, err := c.requests.lister.KubefenceRemediations(ns).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && healthcheck.Withdrawn(kr, string(kr.UID)) != "") {
		c.requests.done(node.Name, key)
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	if carried := c.carrier(kr); carried != nil {
		// An incident already answers it (one that ended too: a request whose node was
		// fenced and recovered must not fence it again while the health checker waits to
		// see it healthy and delete the request).
		c.requests.answered(node.Name, key)
		return false, 0, nil
	}
	live, err := c.store.OpenLive(ctx, node.Name)
	if err != nil {
		return false, 0, err
	}
	if len(live) > 0 {
		// The cache is behind the API server: the request joins that incident once the
		// informer brings it.
		c.requests.answered(node.Name, key)
		return true, time.Second, nil
	}
	// The create follows a Lease check passed within the renew deadline, as every write
	// that carries no epoch (invariant 2), after the reads.
	if err := c.leaseConfirmed(ctx); err != nil {
		return false, 0, err
	}
	req := healthcheck.Request(kr, node.Name)
	c.step(ctx, req, c.now(), v1alpha1.StepRequested, req.Spec.Reason)
	created, err := c.store.Create(ctx, req)
	if apierrors.IsAlreadyExists(err) {
		// Opened for this request before, by an attempt whose outcome was lost.
		created, err = c.opts.Fencing.FencingV1alpha1().NodeFences().Get(ctx, req.Name, metav1.GetOptions{})
	}
	if err != nil {
		return false, 0, err
	}
	c.requests.done(node.Name, key)
	c.metrics.incidents.WithLabelValues(string(v1alpha1.PhasePending)).Inc()
	c.event(node, created, corev1.EventTypeWarning, v1alpha1.ReasonDetected, "%s; incident %s opened", req.Spec.Reason, created.Name)
	ctx = withLogValues(ctx, "incident", created.Name)
	klog.FromContext(ctx).Info("Incident opened for a remediation request", "request", key, "caller", healthcheck.Caller(kr))
	c.requests.queue.Add(key)
	requeue, err := c.drive(ctx, created, node, pn, obs)
	return true, requeue, err
}

// requestWithdrawn says why the remediation request nf was opened for no longer stands
// ("" while it does, or when nf was not opened for one). live reads the request from
// the API server, as before an agent is called; otherwise the cache is enough.
func (c *Controller) requestWithdrawn(ctx context.Context, nf *v1alpha1.NodeFence, live bool) (string, error) {
	key := nf.Annotations[v1alpha1.RemediationAnnotation]
	if !isRequest(nf) || c.requests == nil {
		return "", nil
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return "", fmt.Errorf("incident %s: annotation %s: %w", nf.Name, v1alpha1.RemediationAnnotation, err)
	}
	var kr *v1alpha1.KubefenceRemediation
	if live {
		kr, err = c.opts.Fencing.FencingV1alpha1().KubefenceRemediations(ns).Get(ctx, name, metav1.GetOptions{})
	} else {
		kr, err = c.requests.lister.KubefenceRemediations(ns).Get(name)
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

// withdraw ends an incident whose remediation request no longer stands, before any agent
// was called.
func (c *Controller) withdraw(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, why string) error {
	msg := "remediation request withdrawn before fencing started: " + why
	if err := c.enter(ctx, nf, node, transition{to: v1alpha1.PhaseCancelled, message: &msg, count: true,
		step: v1alpha1.StepCancelled, detail: msg, event: note{corev1.EventTypeNormal, v1alpha1.ReasonCancelled,
			fmt.Sprintf("Incident %s of node %s cancelled before fencing: %s", nf.Name, node.Name, why)}}); err != nil {
		return err
	}
	return c.save(ctx, nf)
}

// standsOrWithdraw checks, before an incident opened for a remediation request is held or
// fenced, that the request still stands; when it does not, the incident is cancelled and
// true returned.
func (c *Controller) standsOrWithdraw(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, live bool) (bool, error) {
	if len(nf.Status.Attempts) > 0 {
		return false, nil // a fence under way is finished and verified, never withdrawn
	}
	why, err := c.requestWithdrawn(ctx, nf, live)
	if err != nil || why == "" {
		return false, err
	}
	klog.FromContext(ctx).Info("Remediation request withdrawn", "why", why)
	return true, c.withdraw(ctx, nf, node, why)
}

// isRequest reports whether nf was opened for a remediation request.
func isRequest(nf *v1alpha1.NodeFence) bool {
	return strings.HasPrefix(nf.Spec.RequestedBy, v1alpha1.RequestedByRemediationPrefix) &&
		nf.Annotations[v1alpha1.RemediationAnnotation] != ""
}
