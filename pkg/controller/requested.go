package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/healthcheck"
	"github.com/kubefence/kubefence/pkg/policy"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// openRequested opens, in node's sync, the incident a request asked for, once the node
// has no open incident: read live from the API server, as before any incident is opened.
// It reports false when there was nothing to open.
func (c *Controller) openRequested(ctx context.Context, node *corev1.Node, pol *v1alpha1.Policy, pn policy.Node, obs detector.Observation) (bool, time.Duration, error) {
	if c.peers.requests == nil || pol == nil {
		// A node no policy governs: the request's own sync says so in its status.
		return false, 0, nil
	}
	key := c.peers.requests.Wanted(node.Name)
	if key == "" {
		return false, 0, nil
	}
	kr, err := c.peers.requests.Lookup(key)
	if err != nil {
		c.peers.requests.Done(node.Name, key)
		return false, 0, err
	}
	if kr == nil || healthcheck.Withdrawn(kr, string(kr.UID)) != "" {
		c.peers.requests.Done(node.Name, key)
		return false, 0, nil
	}
	if carried := c.peers.requests.Carrier(kr); carried != nil {
		// An incident already answers it (one that ended too: a request whose node was
		// fenced and recovered must not fence it again while the health checker waits to
		// see it healthy and delete the request).
		c.peers.requests.Answered(node.Name, key)
		return false, 0, nil
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
	c.event(node, created, corev1.EventTypeWarning, v1alpha1.ReasonDetected, "%s; incident %s opened", req.Spec.Reason, created.Name)
	ctx = withLogValues(ctx, "incident", created.Name)
	klog.FromContext(ctx).Info("Incident opened for a remediation request", "request", key, "caller", healthcheck.Caller(kr))
	c.peers.requests.Queue(key)
	requeue, err := c.drive(ctx, created, node, pn, obs)
	return true, requeue, err
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
	return c.record.Save(ctx, nf)
}

// standsOrWithdraw checks, before an incident opened for a remediation request is held or
// fenced, that the request still stands; when it does not, the incident is cancelled and
// true returned.
func (c *Controller) standsOrWithdraw(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, live bool) (bool, error) {
	if len(nf.Status.Attempts) > 0 {
		return false, nil // a fence under way is finished and verified, never withdrawn
	}
	why, err := c.peers.requests.Withdrawn(ctx, nf, live)
	if err != nil || why == "" {
		return false, err
	}
	klog.FromContext(ctx).Info("Remediation request withdrawn", "why", why)
	return true, c.withdraw(ctx, nf, node, why)
}
