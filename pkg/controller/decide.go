package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/policy"
)

// drive moves an open incident on by one or more steps, persisting each. What to do is
// the machine's (fencer.Lifecycle); drive carries it out.
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
	if done, err := c.answerWord(ctx, nf, node, pol); done || err != nil {
		// A held incident is looked at again as after any decision.
		return fencer.HoldRecheck, err
	}
	f := fencer.Facts{Now: c.now(), Obs: obs, Ready: detector.Ready(node), Identity: c.opts.Identity, Strategy: pol.Remediation, DryRun: dryRun(c.cfg, pol),
		CreatedHere: ctx.Value(createdKey{}) == nf.Name, Superseded: c.supersededBy(nf)}
	for {
		a := fencer.Lifecycle(nf, f)
		switch a.Kind {
		case fencer.ActDecide:
			d, err := c.decision(pol, pn, node, nf, f.Now)
			if err != nil {
				return 0, err
			}
			f.Decision = &d
		case fencer.ActConfirmLive:
			life, err := c.liveSignOfLife(ctx, nf, node, pol)
			if err != nil {
				return 0, err
			}
			f.Live = &life
		case fencer.ActRecheck:
			return a.After, nil
		case fencer.ActCancel:
			return 0, c.cancel(ctx, nf, node, "node alive before fencing started: "+a.Life,
				fmt.Sprintf("Node %s is alive (%s); incident %s cancelled before fencing", node.Name, a.Life, nf.Name))
		case fencer.ActNotYet:
			// A health checker's request is withdrawn when it deletes it or times out; the
			// cache is enough while nothing is done.
			if gone, err := c.standsOrWithdraw(ctx, nf, node, false); gone || err != nil {
				return 0, err
			}
			return a.After, c.notYet(ctx, nf, node, a)
		case fencer.ActStartFencing:
			// Before the first agent call the request is read from the API server.
			if gone, err := c.standsOrWithdraw(ctx, nf, node, true); gone || err != nil {
				return 0, err
			}
			return c.startFencing(ctx, nf, node, pol, a)
		case fencer.ActFence:
			if adoptedFencing(nf, c.opts.Identity) {
				// A release the earlier leader made and did not record is carried on,
				// not fenced again.
				if done, requeue, err := c.resumeRelease(ctx, nf, node, pol); done {
					return requeue, err
				}
			}
			return c.fence(ctx, nf, node, pol)
		case fencer.ActRelease:
			return c.release(ctx, nf, node, pol)
		case fencer.ActReleaseLate:
			return c.releaseLate(ctx, nf, node, pol)
		case fencer.ActContradict:
			return 0, c.contradiction(ctx, nf, node)
		case fencer.ActRecover:
			return c.recover(ctx, nf, node, obs)
		default:
			return 0, nil
		}
	}
}

// adoptedFencing reports whether nf is Fencing on another replica's record.
func adoptedFencing(nf *v1alpha1.NodeFence, identity string) bool {
	return nf.Status.Phase == v1alpha1.PhaseFencing && nf.Status.Leader != "" && nf.Status.Leader != identity
}

// createdKey marks a context whose sync created the incident it names, right after a
// read of the node's Lease from the API server.
type createdKey struct{}

// supersededBy says why nf's evidence predates the node's life: another incident of the
// node ended after nf opened, Recovered on a new boot or Cancelled on a sign of life;
// "" when none did. The end is on the controller's clock and the opening on the API
// server's, to the second: within that second, an incident counts as opened before.
func (c *Controller) supersededBy(nf *v1alpha1.NodeFence) string {
	incs, err := c.store.ForNode(nf.Spec.NodeName)
	if err != nil {
		return "" // an incident the cache cannot decode fails the node's sync first
	}
	opened := nf.CreationTimestamp.Time
	for _, other := range incs {
		var ended time.Time
		switch other.Status.Phase {
		case v1alpha1.PhaseRecovered:
			ended = fencer.StepTime(other, v1alpha1.StepRecovered)
		case v1alpha1.PhaseCancelled:
			ended = fencer.StepTime(other, v1alpha1.StepCancelled)
		}
		if other.Name != nf.Name && !ended.IsZero() && !ended.Before(opened) {
			return fmt.Sprintf("incident %s of node %s ended %s at %s, after this one opened at %s: the node lived since",
				other.Name, nf.Spec.NodeName, other.Status.Phase, fencer.Stamp(ended), fencer.Stamp(opened))
		}
	}
	return ""
}

func (c *Controller) policyByName(name string) *v1alpha1.Policy {
	for i := range c.cfg.Policies {
		if c.cfg.Policies[i].Name == name {
			return &c.cfg.Policies[i]
		}
	}
	return nil
}

// decision is policy's answer for a pending or held incident of node
// (nodeview.Sources.Decision, which explain states too), admitted with this replica's
// claims on the budget.
func (c *Controller) decision(pol *v1alpha1.Policy, pn policy.Node, node *corev1.Node, nf *v1alpha1.NodeFence, now time.Time) (policy.Decision, error) {
	return c.sources().Decision(pol, pn, node, nf, now, c.admit)
}

// admit is policy's verdict on the incident named incident, of node pn, from the cached
// incidents and this replica's claims on the budget (nodeview.Admission.Admit).
func (c *Controller) admit(pol *v1alpha1.Policy, pn policy.Node, cl policy.Cluster, incident string, now time.Time) policy.Decision {
	return c.decide.admission.Admit(c.store.Cached(), pol, pn, cl, incident, now)
}

// startFencing moves the incident to Fencing at level 1 and fences.
func (c *Controller) startFencing(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy, a fencer.Action) (time.Duration, error) {
	if a.Forced != "" {
		c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepForced, a.Forced)
		c.decide.admission.ClaimForced(nf.Name, node.Name, c.now())
	}
	nf.Status.Level = 1
	if err := c.enter(ctx, nf, node, transition{to: v1alpha1.PhaseFencing, message: ptr.To(""), count: true,
		step: v1alpha1.StepFenceStarted, detail: fmt.Sprintf("policy %s: %s", pol.Name, a.Decision.Message),
		event: note{corev1.EventTypeWarning, v1alpha1.ReasonFenceStarted, fmt.Sprintf("Fencing node %s (incident %s)", node.Name, nf.Name)}}); err != nil {
		return 0, err
	}
	// Persisted with the first attempt, before the first agent call.
	return c.fence(ctx, nf, node, pol)
}

// notYet records a decision that does not fence (wait or hold) when it changes what the
// incident says.
func (c *Controller) notYet(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, a fencer.Action) error {
	if !a.Record {
		return nil
	}
	d := a.Decision
	t := transition{to: a.Phase, message: ptr.To(d.Message),
		// The step is named after the verdict: v1alpha1.StepWait or StepHold (TestVerdictStepTypes).
		step: string(d.Verdict), detail: d.Reason + ": " + d.Message}
	if d.Verdict == policy.Hold {
		c.metrics.Holds.WithLabelValues(d.Reason).Inc()
		t.event = note{corev1.EventTypeWarning, d.Reason, fmt.Sprintf("Fencing of node %s held: %s", node.Name, d.Message)}
	}
	if err := c.enter(ctx, nf, node, t); err != nil {
		return err
	}
	return c.record.Save(ctx, nf)
}

// cancel ends an incident that has not started fencing, on a sign of life or when the
// remediation request it was opened for is withdrawn: msg says why on the incident, and
// event on the node.
func (c *Controller) cancel(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, msg, event string) error {
	if err := c.enter(ctx, nf, node, transition{to: v1alpha1.PhaseCancelled, message: &msg, count: true,
		step: v1alpha1.StepCancelled, detail: msg, event: note{corev1.EventTypeNormal, v1alpha1.ReasonCancelled, event}}); err != nil {
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
	return true, c.cancel(ctx, nf, node, "remediation request withdrawn before fencing started: "+why,
		fmt.Sprintf("Incident %s of node %s cancelled before fencing: %s", nf.Name, node.Name, why))
}
