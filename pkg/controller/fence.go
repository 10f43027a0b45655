package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/testpoint"
)

// fence runs the fencer state machine until it must wait, is done or gives up.
//
// The incident is written before every agent call that changes the machine (the fence
// is then re-issued on resume) and whenever it waits or ends. What the agents answered
// in between is written with the next of those: losing it to a crash only means the
// fence is issued and read back again, which agents do idempotently.
func (c *Controller) fence(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy) (time.Duration, error) {
	plan := fencer.PlanFor(pol, c.opts.Config.Agents, c.opts.Tuning.PollInterval)
	unsaved := false
	wait := func(d time.Duration) (time.Duration, error) {
		if !unsaved {
			return d, nil
		}
		return d, c.record.Save(ctx, nf)
	}
	for {
		now := c.now()
		step := fencer.Next(&nf.Status, plan, now)
		switch step.Kind {
		case fencer.DoWait:
			return wait(max(step.Until.Sub(now), 10*time.Millisecond))
		case fencer.Done:
			return c.fenced(ctx, nf, node, pol)
		case fencer.GiveUp:
			return c.giveUp(ctx, nf, node, pol, step)
		case fencer.DoExpire:
			if err := c.applyAndSave(ctx, nf, plan, fencer.Event{Kind: fencer.Expired, Level: step.Level, Agent: step.Agent, Try: step.Try}); err != nil {
				return 0, err
			}
		case fencer.DoFence:
			if why := c.peers.pauses.Why(); why != "" {
				return c.pausedFence(ctx, nf, step, why)
			}
			sent, err := c.issueFence(ctx, nf, node, plan, step)
			if err != nil {
				return 0, err
			}
			unsaved = unsaved || sent
		case fencer.DoVerify:
			changed, err := c.callAndApply(ctx, nf, node, plan, step)
			if err != nil {
				return 0, err
			}
			unsaved = unsaved || changed
			if a := fencer.LastAttempt(&nf.Status); a != nil && a.State == v1alpha1.AttemptVerifying && !changed {
				return wait(plan.PollInterval)
			}
		}
	}
}

// giveUp ends an incident whose every level failed, unless an earlier leader of it
// released the node: then it records the release it finds instead.
func (c *Controller) giveUp(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy, step fencer.Step) (time.Duration, error) {
	// Nothing is recorded as "nothing released" when this incident did release
	// the node: its owner mark is on it.
	if done, requeue, err := c.resumeRelease(ctx, nf, node, pol); done {
		return requeue, err
	}
	if err := c.enter(ctx, nf, node, transition{to: v1alpha1.PhaseFailed, message: ptr.To(step.Reason), count: true,
		step: v1alpha1.StepFailed, detail: step.Reason, event: note{corev1.EventTypeWarning, v1alpha1.ReasonFenceFailed,
			fmt.Sprintf("Fencing node %s failed; nothing was released: %s", node.Name, step.Reason)}}); err != nil {
		return 0, err
	}
	return 0, c.record.Save(ctx, nf)
}

// issueFence carries out a DoFence step: it skips a level whose agent is down, or
// writes the call ahead, confirms the leader Lease and sends it. sent says the call went
// out, and its answer waits for the incident's next save.
func (c *Controller) issueFence(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, plan fencer.Plan, step fencer.Step) (bool, error) {
	// The call follows a fresh read of the leader Lease and the write of the issued
	// attempt.
	if why := c.peers.health.Down(step.Agent); why != "" {
		msg := fmt.Sprintf("level %d skipped: agent %s is down: %s", step.Level, step.Agent, why)
		c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepLevelSkipped, msg)
		c.record.Event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonAgentDown, "%s", msg)
		if err := c.applyAndSave(ctx, nf, plan, fencer.Event{Kind: fencer.Skipped, Level: step.Level, Agent: step.Agent,
			Try: step.Try, Err: errors.New(msg), ErrKind: plugin.KindAgentDown}); err != nil {
			return false, err
		}
		return false, nil
	}
	// Written ahead: the call is on record, with its target and time, before it
	// is sent, so a crash or an API server outage cannot hide an action the
	// device took.
	target, terr := c.fenceTarget(nf, node, step)
	c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepAgentCalled, c.callRecord(nf, step, target, terr))
	// The one fresh read of the leader Lease an incident needs: a power-off is
	// the act a deposed replica must never send, so it does not ride on an
	// earlier confirmation. It goes out together with the write of the issued
	// attempt (a write of its own epoch, after a confirmation within the renew
	// deadline); the call waits for both.
	checked := make(chan error, 1)
	go func() { checked <- c.lead.guard.Check(ctx) }()
	if err := c.applyAndSave(ctx, nf, plan, fencer.Event{Kind: fencer.FenceIssued, Level: step.Level, Agent: step.Agent, Try: step.Try,
		Target: target}); err != nil {
		<-checked
		return false, err
	}
	if err := <-checked; err != nil {
		return false, err
	}
	c.lead.pause.At(testpoint.BeforeFenceCall)
	// The fresh check vouches for this replica for one renew deadline. A replica
	// paused since (SIGSTOP, a frozen VM) may have been replaced while it slept, and
	// its power-off would be a deposed leader's: past the deadline it reads the Lease
	// again, and a deposed one stops here.
	if err := c.lead.guard.Confirmed(ctx); err != nil {
		return false, err
	}
	if _, err := c.callAndApply(ctx, nf, node, plan, step); err != nil {
		return false, err
	}
	return true, nil
}

// callAndApply calls the agent for step and applies the outcome to the incident in
// memory; it reports whether there is anything new to record.
func (c *Controller) callAndApply(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, plan fencer.Plan, step fencer.Step) (bool, error) {
	a := fencer.AttemptOf(&nf.Status, step.Level, step.Agent, step.Try)
	if a == nil {
		return false, fmt.Errorf("incident %s: no try %d of agent %s at level %d to call", nf.Name, step.Try, step.Agent, step.Level)
	}
	ev := c.callStep(ctx, nf, node, step, a.Deadline.Time)
	if step.Kind == fencer.DoFence {
		c.lead.pause.At(testpoint.AfterFenceCall)
	}
	prev := a.State
	if err := fencer.Apply(&nf.Status, plan, ev, c.now()); err != nil {
		return false, fmt.Errorf("incident %s: %w", nf.Name, err)
	}
	now := c.now()
	switch {
	case ev.Err != nil && step.Kind == fencer.DoVerify && fencer.LastAttempt(&nf.Status).State == prev && incidents.LastStepIs(&nf.Status, v1alpha1.StepAgentError, ev.Err.Error()):
		// The same read error again while verifying: nothing new to record.
		return false, nil
	case ev.Err != nil:
		c.record.StepAt(ctx, nf, now, v1alpha1.StepAgentError, fmt.Sprintf("agent %s %s %s: %v", step.Agent, fencecall.Method(step), ev.ErrKind, ev.Err))
	case step.Kind == fencer.DoFence:
		c.record.StepAt(ctx, nf, now, v1alpha1.StepAgentReturned, fmt.Sprintf("agent %s reports %s: %s", step.Agent, ev.State, ev.Evidence))
	case a.State != prev:
		msg := fmt.Sprintf("agent %s read %s: %s", step.Agent, ev.State, ev.Evidence)
		if prev == v1alpha1.AttemptFencing {
			msg += "; " + a.Error // found in flight and read back first (fencer.lostInFlight)
		}
		c.record.StepAt(ctx, nf, now, v1alpha1.StepStateReadBack, msg)
	default:
		// Still verifying with nothing new: no write, the next poll comes soon.
		return false, nil
	}
	return true, nil
}

// fenceTarget is the device step's Fence call goes to: the one the agent's first attempt
// in the incident recorded (a re-issue, a retry and a later level go where the first
// call went: one incident, one device per agent), or the one the node names now. A
// mapping edited mid-incident takes effect with the node's next incident. A mapping that
// fails gives "" and its error: the call then fails with it.
func (c *Controller) fenceTarget(nf *v1alpha1.NodeFence, node *corev1.Node, step fencer.Step) (string, error) {
	if step.Agent == v1alpha1.WatchdogAgent {
		return "", nil
	}
	for _, a := range nf.Status.Attempts {
		if a.Agent == step.Agent && a.Target != "" {
			return a.Target, nil
		}
	}
	return c.caller.Resolve(step.Agent, node, nil)
}

// callRecord describes the Fence call step is about to send to target.
func (c *Controller) callRecord(nf *v1alpha1.NodeFence, step fencer.Step, target string, err error) string {
	switch {
	case step.Agent == v1alpha1.WatchdogAgent:
		target = "(the node's own watchdog)"
	case err != nil:
		target = "(none: " + err.Error() + ")"
	}
	return fmt.Sprintf("level %d agent %s try %d: Fence off, target %s", step.Level, step.Agent, step.Try, target)
}

func (c *Controller) applyAndSave(ctx context.Context, nf *v1alpha1.NodeFence, plan fencer.Plan, ev fencer.Event) error {
	if err := fencer.Apply(&nf.Status, plan, ev, c.now()); err != nil {
		return fmt.Errorf("incident %s: %w", nf.Name, err)
	}
	return c.record.Save(ctx, nf)
}
