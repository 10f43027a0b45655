package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/podrelease"
)

// transition is one move of an incident's phase and what reports it.
type transition struct {
	to v1alpha1.Phase
	// message replaces Status.Message when set.
	message *string
	// step and detail are the timeline step recorded with the move.
	step, detail string
	// count adds the move to kubefence_incidents_total{phase}.
	count bool
	// event, when its reason is set, is the Event on the node and the incident.
	event note
}

// note is an Event: its type, reason and message.
type note struct{ typ, reason, message string }

// enter moves nf to t.to: the one place where an incident's phase changes, checked
// against fencer.CanMove. It records the step, counts the phase and queues the Event
// (held until the incident is saved, incidents.PendingEvents); the caller saves.
func (c *Controller) enter(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, t transition) error {
	if from := nf.Status.Phase; !fencer.CanMove(from, t.to) {
		return fmt.Errorf("incident %s: no move from phase %q to %s", nf.Name, from, t.to)
	}
	if t.to == v1alpha1.PhaseFenced && !nf.Status.Verified() {
		// Fenced leads to the release: only a verified level or a person's accepted
		// confirm-off gets there (invariant 1).
		return fmt.Errorf("incident %s: not verified, no move to %s", nf.Name, t.to)
	}
	nf.Status.Phase = t.to
	if t.message != nil {
		nf.Status.Message = *t.message
	}
	c.record.StepAt(ctx, nf, c.now(), t.step, t.detail)
	if t.count {
		c.metrics.Incidents.WithLabelValues(string(t.to)).Inc()
	}
	if t.event.reason != "" {
		c.record.Event(node, nf, t.event.typ, t.event.reason, "%s", t.event.message)
	}
	return nil
}

// withLogValues returns ctx with its logger carrying keysAndValues: what a sync logs
// names its node and incident.
func withLogValues(ctx context.Context, keysAndValues ...any) context.Context {
	return klog.NewContext(ctx, klog.LoggerWithValues(klog.FromContext(ctx), keysAndValues...))
}

// releaserFor is the Releaser acting for nf: its steps go to nf's timeline.
func (c *Controller) releaserFor(ctx context.Context, nf *v1alpha1.NodeFence) podrelease.Releaser {
	r := *c.releaser
	r.OnStep = func(step, msg string) { c.record.StepAt(ctx, nf, c.now(), step, msg) }
	r.Before = func(ctx context.Context, action string) error {
		c.lead.pause.At(action)
		return c.lead.guard.Confirmed(ctx)
	}
	return r
}
