package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/policy"
)

// holdRecheck is how often a held or waiting incident asks policy again.
const holdRecheck = 2 * time.Second

// drive moves an open incident on by one or more steps, persisting each.
func (c *Controller) drive(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pn policy.Node, obs detector.Observation) (time.Duration, error) {
	nf = nf.DeepCopy()
	ctx = withLogValues(ctx, "incident", nf.Name)
	pol := c.policyByName(nf.Status.Policy)
	if pol == nil {
		var err error
		if pol, err = policy.Select(c.cfg.Policies, node.Labels); err != nil {
			return 0, fmt.Errorf("incident %s: node %s: %w", nf.Name, node.Name, err)
		}
		if pol == nil {
			return 0, fmt.Errorf("incident %s: no policy governs node %s", nf.Name, node.Name)
		}
		nf.Status.Policy = pol.Name
	}
	switch nf.Status.Phase {
	case "", v1alpha1.PhasePending, v1alpha1.PhaseHeld:
		return c.decide(ctx, nf, node, pn, obs, pol)
	case v1alpha1.PhaseFencing:
		return c.fence(ctx, nf, node, pol)
	case v1alpha1.PhaseFenced:
		return c.release(ctx, nf, node, pol)
	case v1alpha1.PhaseRemediated:
		if obs.Health == detector.Unhealthy {
			return c.releaseLate(ctx, nf, node, obs, pol)
		}
		return c.recover(ctx, nf, node, obs)
	}
	return 0, nil
}

// budgetReasons are the holds and waits a forced incident overrides; pause, exclusion
// and dry run are a person's switches and stand.
var budgetReasons = map[string]bool{
	policy.ReasonStorm: true, policy.ReasonStormPending: true, policy.ReasonZoneDark: true, policy.ReasonCooldown: true, policy.ReasonControlPlane: true,
	policy.ReasonMaxConcurrent: true, policy.ReasonRateLimited: true, policy.ReasonNothingToRelease: true,
}

func forced(nf *v1alpha1.NodeFence) bool { return nf.Annotations[v1alpha1.ForceAnnotation] == "true" }

func (c *Controller) policyByName(name string) *v1alpha1.Policy {
	for i := range c.cfg.Policies {
		if c.cfg.Policies[i].Name == name {
			return &c.cfg.Policies[i]
		}
	}
	return nil
}

// decide asks policy whether a pending or held incident may start fencing.
func (c *Controller) decide(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pn policy.Node, obs detector.Observation, pol *v1alpha1.Policy) (time.Duration, error) {
	now := c.now()
	if nf.Status.BootID == "" {
		nf.Status.BootID = obs.BootID
	}
	// The controller's own incident ends on a sign of life from the node; a person's
	// request stands until it is fenced or deleted. Evidence recorded by an earlier
	// leader stands too: this replica's restarted clocks are not a sign of life.
	if len(nf.Status.Attempts) == 0 && nf.Spec.RequestedBy == RequestedByController {
		if life := signOfLife(nf, obs); life != "" {
			return 0, c.cancel(ctx, nf, node, life)
		}
		if len(nf.Status.Timeline) == 0 && obs.Health != detector.Unhealthy {
			// Created by a replica that stopped before it wrote the detection: there is
			// no recorded evidence to adopt, so this replica's own must say unhealthy
			// (after the evidence floor). Nothing is cancelled meanwhile.
			return holdRecheck, nil
		}
	}
	cl, err := c.cluster(pol, now)
	if err != nil {
		return 0, err
	}
	if pn.Name == "" {
		pn = policy.NewNode(pol, node.Name, node.Labels)
	}
	// A person's request fences a node the detector does not (yet) find unhealthy; the
	// budget still applies to it.
	pn.Unhealthy = true
	d := policy.Decide(pol, pn, cl, now)
	if d.Verdict == policy.WouldFence {
		// An incident in dry run (opened by a person) is held: shadow mode touches nothing.
		d.Verdict = policy.Hold
	}
	if forced(nf) && budgetReasons[d.Reason] && d.Verdict != policy.Fence {
		c.step(ctx, nf, now, v1alpha1.StepForced, fmt.Sprintf("%s overridden by %s=true: %s", d.Reason, v1alpha1.ForceAnnotation, d.Message))
		d = policy.Decision{Verdict: policy.Fence, Message: fmt.Sprintf("forced past %s", d.Reason)}
	}
	if d.Verdict != policy.Fence {
		return c.notYet(ctx, nf, node, d, now)
	}
	if adopted(nf, c.opts.Identity) && nf.Spec.RequestedBy == RequestedByController {
		// Evidence this replica did not gather is checked against the API server once
		// before it fences on it.
		life, err := c.liveSignOfLife(ctx, nf, node)
		if err != nil {
			return 0, err
		}
		if life != "" {
			return 0, c.cancel(ctx, nf, node, life)
		}
	}
	nf.Status.Level = 1
	if err := c.enter(ctx, nf, node, transition{to: v1alpha1.PhaseFencing, message: text(""), count: true,
		step: v1alpha1.StepFenceStarted, detail: fmt.Sprintf("policy %s: %s", pol.Name, d.Message),
		event: note{corev1.EventTypeWarning, v1alpha1.ReasonFenceStarted, fmt.Sprintf("Fencing node %s (incident %s)", node.Name, nf.Name)}}); err != nil {
		return 0, err
	}
	// Persisted with the first attempt, before the first agent call.
	return c.fence(ctx, nf, node, pol)
}

// notYet records a decision that does not fence (wait or hold) when it changes what the
// incident says, and says when to ask policy again.
func (c *Controller) notYet(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, d policy.Decision, now time.Time) (time.Duration, error) {
	phase := v1alpha1.PhasePending
	if d.Verdict == policy.Hold {
		phase = v1alpha1.PhaseHeld
	}
	// Leader is empty until this controller first writes the status (a fresh incident).
	if nf.Status.Phase != phase || nf.Status.Message != d.Message || nf.Status.Leader == "" {
		t := transition{to: phase, message: text(d.Message),
			// The step is named after the verdict: v1alpha1.StepWait or StepHold (TestVerdictStepTypes).
			step: string(d.Verdict), detail: d.Reason + ": " + d.Message}
		if d.Verdict == policy.Hold {
			c.metrics.holds.WithLabelValues(d.Reason).Inc()
			t.event = note{corev1.EventTypeWarning, d.Reason, fmt.Sprintf("Fencing of node %s held: %s", node.Name, d.Message)}
		}
		if err := c.enter(ctx, nf, node, t); err != nil {
			return 0, err
		}
		if err := c.save(ctx, nf); err != nil {
			return 0, err
		}
	}
	if d.Verdict == policy.Wait && d.Until.After(now) {
		return d.Until.Sub(now), nil
	}
	return holdRecheck, nil
}
