package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/healthcheck"
	"github.com/kubefence/kubefence/pkg/loopmetrics"
	"github.com/kubefence/kubefence/pkg/oncall"
	"github.com/kubefence/kubefence/pkg/podrelease"
	"github.com/kubefence/kubefence/pkg/policy"
	"github.com/kubefence/kubefence/pkg/testpoint"
)

// sync looks at one node and moves its incident on. It returns when to look again.
func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	ctx = withLogValues(ctx, "node", name)
	now := c.now()
	node, err := c.caches.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		// A deleted Node object says nothing about the machine; an open incident keeps
		// its state and a person decides. Nothing new is started for a node we cannot see.
		obs := c.detector.NodeDeleted(name, now)
		klog.FromContext(ctx).V(2).Info("Node deleted", "evidence", obs.Evidence)
		c.decide.dryRunReports.Forget(name)
		if nf := c.waitingWord(name, true); nf != nil {
			// A person's cancel closes the incident of a node that is gone for good.
			_, err := c.answerWord(withLogValues(ctx, "incident", nf.Name), nf, nil, nil)
			return 0, err
		}
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("get node %s: %w", name, err)
	}
	pol, err := policy.Select(c.cfg.Policies, node.Labels)
	if err != nil {
		return 0, fmt.Errorf("node %s: %w", name, err)
	}
	var pn policy.Node
	var obs detector.Observation
	if pol != nil {
		pn, obs = c.sources().Observe(ctx, pol, node, now)
	} else {
		c.peers.agents.ObserveAgent(name)
		obs = c.detector.Assess(node, now)
	}
	if obs.Health == detector.Healthy {
		// The unhealthy episode, if any, is over.
		c.decide.dryRunReports.Forget(name)
	}
	if pol == nil || !dryRun(c.cfg, pol) {
		// Shadow mode touches nothing, not even the pods' NodeUnreachable condition.
		podrelease.MarkUnreachable(ctx, c.client, c.podsOn(obs.Node), detector.PodCondition(obs, now), c.lead.guard.Check)
	}
	inc, err := c.store.Open(name)
	if err != nil {
		return 0, err
	}
	if inc != nil || obs.Health == detector.Unhealthy {
		// An incident under way, or about to open: its writes free workloads.
		c.decide.gate.Enter()
		defer c.decide.gate.Leave()
		ctx = context.WithValue(ctx, gateKey{}, true)
	}
	if inc != nil {
		c.peers.requests.Joined(name)
	}
	if inc == nil {
		if nf := c.waitingWord(name, false); nf != nil && pol != nil {
			// A person's word on a Failed incident (confirm-off: the BMC died with the node).
			return c.drive(ctx, nf, node, pn, obs)
		}
		if opened, requeue, err := c.openRequested(ctx, node, pol, pn, obs); opened || err != nil {
			return requeue, err
		}
		if pol == nil {
			return 0, nil
		}
		return c.maybeOpen(ctx, node, pol, pn, obs, now)
	}
	return c.drive(ctx, inc, node, pn, obs)
}

// maybeOpen opens an incident for an unhealthy node, or says when to look again. In dry
// run it only reports what it would do.
func (c *Controller) maybeOpen(ctx context.Context, node *corev1.Node, pol *v1alpha1.Policy, pn policy.Node, obs detector.Observation, now time.Time) (time.Duration, error) {
	if obs.Health != detector.Unhealthy {
		if !obs.UnhealthyAt.IsZero() {
			return max(obs.UnhealthyAt.Sub(now), 10*time.Millisecond), nil
		}
		return 0, nil
	}
	if dryRun(c.cfg, pol) {
		cl, err := c.sources().Cluster(pol, now)
		if err != nil {
			return 0, err
		}
		if d := c.admit(pol, pn, cl, "", now); d.Verdict == policy.WouldFence {
			c.wouldFence(ctx, node, obs, d)
		}
		return fencer.HoldRecheck, nil
	}
	if why := c.failedUnrecovered(node.Name, obs); why != "" {
		klog.FromContext(ctx).V(2).Info("No new incident", "reason", why)
		return fencer.HoldRecheck, nil
	}
	// The node's Lease and its open incidents are both read live before an incident
	// opens; the two reads go out together, not one after the other.
	type openRead struct {
		live []*v1alpha1.NodeFence
		err  error
	}
	opened := make(chan openRead, 1)
	go func() {
		live, err := c.store.OpenLive(ctx, node.Name)
		opened <- openRead{live, err}
	}()
	fresh, err := c.confirmStale(ctx, node, pol)
	open := <-opened
	if err != nil || !fresh {
		return fencer.HoldRecheck, err
	}
	// The create follows a Lease check passed within the renew deadline, as every write
	// that carries no epoch (invariant 2).
	if err := c.lead.guard.Confirmed(ctx); err != nil {
		return 0, err
	}
	if open.err != nil {
		return 0, open.err
	}
	if len(open.live) > 0 {
		// The cache is behind the API server; the informer event will bring it.
		return time.Second, nil
	}
	nf := newIncident(node, pol, obs)
	c.record.StepAt(ctx, nf, obs.Since, v1alpha1.StepEvidenceStarted, obs.Evidence)
	c.record.StepAt(ctx, nf, now, v1alpha1.StepDetected, fmt.Sprintf("unhealthy for longer than the threshold: %s", obs.Evidence))
	created, err := c.store.Create(ctx, nf)
	if err != nil {
		return 0, err
	}
	c.lead.pause.At(testpoint.AfterCreate)
	c.metrics.Incidents.WithLabelValues(string(v1alpha1.PhasePending)).Inc()
	c.metrics.PhaseDuration.WithLabelValues(loopmetrics.DurationDetect).Observe(now.Sub(obs.Since).Seconds())
	c.record.Event(node, created, corev1.EventTypeWarning, v1alpha1.ReasonDetected, "Node %s is unhealthy: %s; incident %s opened", node.Name, obs.Evidence, created.Name)
	ctx = context.WithValue(withLogValues(ctx, "incident", created.Name), createdKey{}, created.Name)
	klog.FromContext(ctx).Info("Incident opened", "evidence", obs.Evidence)
	// Go on at once rather than wait for the informer to bring the new incident back; the
	// first decision writes the status with the detection in it.
	requeue, err := c.drive(ctx, created, node, pn, obs)
	if err != nil && c.store.Fresh(created).ResourceVersion == created.ResourceVersion {
		// The decision failed before it could write: keep the detection on record. (Had
		// it written, this older copy would only be refused on its resourceVersion.)
		if serr := c.record.Save(ctx, created); serr != nil {
			klog.FromContext(ctx).V(2).Info("Recording detection after a failed decision", "err", serr)
		}
	}
	return requeue, err
}

// newIncident is the NodeFence the controller opens for node, unhealthy on obs under
// pol.
func newIncident(node *corev1.Node, pol *v1alpha1.Policy, obs detector.Observation) *v1alpha1.NodeFence {
	nf := &v1alpha1.NodeFence{
		ObjectMeta: metav1.ObjectMeta{GenerateName: node.Name + "-", Labels: map[string]string{v1alpha1.NodeLabel: v1alpha1.LabelValue(node.Name)}},
		Spec: v1alpha1.NodeFenceSpec{NodeName: node.Name, RequestedBy: v1alpha1.RequestedByController,
			Reason: fmt.Sprintf("node unhealthy: %s", obs.Evidence)},
		Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhasePending, Policy: pol.Name, BootID: obs.BootID},
	}
	if !obs.Kubelet.RenewTime.IsZero() {
		rt := metav1.NewMicroTime(obs.Kubelet.RenewTime)
		nf.Status.LeaseRenewTime = &rt
	}
	return nf
}

// confirmStale reads the node's Lease from the API server before an incident is opened
// on the evidence of the cache: a replica that was paused, or whose watch lagged, may not
// have seen the latest renewals. It reports whether the node is still unhealthy. Nodes
// confirmed at once share the read (detector.LeaseReads), sent after each of them asked.
//
// Everything after the read is judged at the time the API server answered, not at the
// sync's start: a read against an API server coming back from an outage can take
// seconds, and an earlier time would count them as the nodes' silence.
func (c *Controller) confirmStale(ctx context.Context, node *corev1.Node, pol *v1alpha1.Policy) (bool, error) {
	lease, found, err := c.caches.nodeLeases.Get(ctx, node.Name)
	now := c.now()
	switch {
	case err == nil && !found:
		return true, nil
	case err != nil:
		c.lead.guard.NoteUnreachable()
		return false, fmt.Errorf("confirm lease of node %s: %w", node.Name, err)
	}
	if c.lead.guard.TakeUnreachable() {
		// This replica could not reach the API server a moment ago, and then no kubelet
		// could renew either: staleness measured across the outage is the control
		// plane's, not the nodes'. It counts again from now, as after a takeover.
		c.detector.RestartClocks(now)
		klog.FromContext(ctx).Info("API server reachable again; Lease staleness counts from now")
		return false, nil
	}
	c.detector.ObserveLease(lease, now)
	_, obs := c.sources().View(pol, node, now)
	if obs.Health != detector.Unhealthy {
		klog.FromContext(ctx).Info("Lease renewed after all; no incident", "evidence", obs.Evidence)
		return false, nil
	}
	return true, nil
}

// openRequested opens, in node's sync, the incident a request asked for, once the node
// has no open incident: read live from the API server, as before any incident is opened.
// It reports false when there was nothing to open.
func (c *Controller) openRequested(ctx context.Context, node *corev1.Node, pol *v1alpha1.Policy, pn policy.Node, obs detector.Observation) (bool, time.Duration, error) {
	if c.peers.requests == nil || pol == nil {
		// A node no policy governs: the request's own sync says so in its status.
		return false, 0, nil
	}
	kr, key, err := c.peers.requests.ToOpen(node.Name)
	if kr == nil || err != nil {
		return false, 0, err
	}
	live, err := c.store.OpenLive(ctx, node.Name)
	if err != nil {
		return false, 0, err
	}
	if len(live) > 0 {
		// The cache is behind the API server: the request joins that incident once the
		// informer brings it.
		c.peers.requests.Answered(node.Name, key)
		return true, time.Second, nil
	}
	// The create follows a Lease check passed within the renew deadline, as every write
	// that carries no epoch (invariant 2), after the reads.
	if err := c.lead.guard.Confirmed(ctx); err != nil {
		return false, 0, err
	}
	req := healthcheck.Request(kr, node.Name)
	c.record.StepAt(ctx, req, c.now(), v1alpha1.StepRequested, req.Spec.Reason)
	created, err := c.store.Create(ctx, req)
	if apierrors.IsAlreadyExists(err) {
		// Opened for this request before, by an attempt whose outcome was lost.
		created, err = c.opts.Fencing.FencingV1alpha1().NodeFences().Get(ctx, req.Name, metav1.GetOptions{})
	}
	if err != nil {
		return false, 0, err
	}
	c.peers.requests.Done(node.Name, key)
	c.metrics.Incidents.WithLabelValues(string(v1alpha1.PhasePending)).Inc()
	c.record.Event(node, created, corev1.EventTypeWarning, v1alpha1.ReasonDetected, "%s; incident %s opened", req.Spec.Reason, created.Name)
	ctx = withLogValues(ctx, "incident", created.Name)
	klog.FromContext(ctx).Info("Incident opened for a remediation request", "request", key, "caller", healthcheck.Caller(kr))
	c.peers.requests.Queue(key)
	requeue, err := c.drive(ctx, created, node, pn, obs)
	return true, requeue, err
}

// failedUnrecovered returns why no automatic incident may open for node
// (oncall.NoNewIncident), or "" when one may: a sign of life is the Lease's since each
// incident opened (fencer.SignOfLife).
func (c *Controller) failedUnrecovered(node string, obs detector.Observation) string {
	incs, err := c.store.ForNode(node)
	if err != nil {
		// An incident the cache cannot decode fails the node's sync (store.Open) before
		// any new incident could open.
		return ""
	}
	return oncall.NoNewIncident(incs, obs.BootID, func(nf *v1alpha1.NodeFence) bool { return fencer.SignOfLife(nf, obs) != "" })
}
