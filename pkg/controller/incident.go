package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/policy"
	"github.com/kubefence/kubefence/pkg/remediate"
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
			return 0, c.cancel(ctx, nf, node, now, life)
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
			return 0, c.cancel(ctx, nf, node, now, life)
		}
	}
	nf.Status.Phase, nf.Status.Message = v1alpha1.PhaseFencing, ""
	nf.Status.Level = 1
	c.step(ctx, nf, now, v1alpha1.StepFenceStarted, fmt.Sprintf("policy %s: %s", pol.Name, d.Message))
	c.metrics.incidents.WithLabelValues(string(v1alpha1.PhaseFencing)).Inc()
	c.event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonFenceStarted, "Fencing node %s (incident %s)", node.Name, nf.Name)
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
		if d.Verdict == policy.Hold {
			c.metrics.holds.WithLabelValues(d.Reason).Inc()
			c.event(node, nf, corev1.EventTypeWarning, d.Reason, "Fencing of node %s held: %s", node.Name, d.Message)
		}
		nf.Status.Phase, nf.Status.Message = phase, d.Message
		// The step is named after the verdict: v1alpha1.StepWait or StepHold (TestVerdictStepTypes).
		c.step(ctx, nf, now, string(d.Verdict), d.Reason+": "+d.Message)
		if err := c.save(ctx, nf); err != nil {
			return 0, err
		}
	}
	if d.Verdict == policy.Wait && d.Until.After(now) {
		return d.Until.Sub(now), nil
	}
	return holdRecheck, nil
}

// fence runs the fencer state machine until it must wait, is done or gives up.
//
// The incident is written before every agent call that changes the machine (the fence
// is then re-issued on resume) and whenever it waits or ends. What the agents answered
// in between is written with the next of those: losing it to a crash only means the
// fence is issued and read back again, which agents do idempotently.
func (c *Controller) fence(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy) (time.Duration, error) {
	plan := fencer.PlanFor(pol, c.opts.PollInterval)
	unsaved := false
	wait := func(d time.Duration) (time.Duration, error) {
		if !unsaved {
			return d, nil
		}
		return d, c.save(ctx, nf)
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
			nf.Status.Phase, nf.Status.Message = v1alpha1.PhaseFailed, step.Reason
			c.step(ctx, nf, now, v1alpha1.StepFailed, step.Reason)
			c.metrics.incidents.WithLabelValues(string(v1alpha1.PhaseFailed)).Inc()
			c.event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonFenceFailed, "Fencing node %s failed; nothing was released: %s", node.Name, step.Reason)
			return 0, c.save(ctx, nf)
		case fencer.DoExpire:
			if err := c.applyAndSave(ctx, nf, plan, fencer.Event{Kind: fencer.Expired, Level: step.Level, Agent: step.Agent, Try: step.Try}); err != nil {
				return 0, err
			}
		case fencer.DoFence:
			// The write of the issued attempt checks the Lease right before the call.
			if why := c.agentDownReason(step.Agent); why != "" {
				msg := fmt.Sprintf("level %d skipped: agent %s is down: %s", step.Level, step.Agent, why)
				c.step(ctx, nf, c.now(), v1alpha1.StepLevelSkipped, msg)
				c.event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonAgentDown, "%s", msg)
				if err := c.applyAndSave(ctx, nf, plan, fencer.Event{Kind: fencer.Skipped, Level: step.Level, Agent: step.Agent,
					Try: step.Try, Err: errors.New(msg), ErrKind: plugin.KindAgentDown}); err != nil {
					return 0, err
				}
				continue
			}
			// Written ahead: the call is on record, with its target and time, before it
			// is sent, so a crash or an API server outage cannot hide an action the
			// device took.
			c.step(ctx, nf, c.now(), v1alpha1.StepAgentCalled, c.callRecord(nf, node, step))
			if err := c.applyAndSave(ctx, nf, plan, fencer.Event{Kind: fencer.FenceIssued, Level: step.Level, Agent: step.Agent, Try: step.Try}); err != nil {
				return 0, err
			}
			c.pause.at(PauseBeforeFenceCall)
			if _, err := c.callAndApply(ctx, nf, node, plan, step); err != nil {
				return 0, err
			}
			unsaved = true
		case fencer.DoVerify:
			changed, err := c.callAndApply(ctx, nf, node, plan, step)
			if err != nil {
				return 0, err
			}
			unsaved = unsaved || changed
			if a := lastAttempt(nf); a != nil && a.State == v1alpha1.AttemptVerifying && !changed {
				return wait(plan.PollInterval)
			}
		}
	}
}

// callAndApply calls the agent for step and applies the outcome to the incident in
// memory; it reports whether there is anything new to record.
func (c *Controller) callAndApply(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, plan fencer.Plan, step fencer.Step) (bool, error) {
	a := lastAttempt(nf)
	ev := c.caller.call(ctx, step, node, c.currentEpoch(), a.Deadline.Time)
	if step.Kind == fencer.DoFence {
		c.pause.at(PauseAfterFenceCall)
	}
	prev := a.State
	if err := fencer.Apply(&nf.Status, plan, ev, c.now()); err != nil {
		return false, fmt.Errorf("incident %s: %w", nf.Name, err)
	}
	now := c.now()
	switch {
	case ev.Err != nil && step.Kind == fencer.DoVerify && lastAttempt(nf).State == prev && lastStepIs(nf, v1alpha1.StepAgentError, ev.Err.Error()):
		// The same read error again while verifying: nothing new to record.
		return false, nil
	case ev.Err != nil:
		c.step(ctx, nf, now, v1alpha1.StepAgentError, fmt.Sprintf("agent %s %s %s: %v", step.Agent, method(step), ev.ErrKind, ev.Err))
	case step.Kind == fencer.DoFence:
		c.step(ctx, nf, now, v1alpha1.StepAgentReturned, fmt.Sprintf("agent %s reports %s: %s", step.Agent, ev.State, ev.Evidence))
	case lastAttempt(nf).State != prev:
		c.step(ctx, nf, now, v1alpha1.StepStateReadBack, fmt.Sprintf("agent %s read %s: %s", step.Agent, ev.State, ev.Evidence))
	default:
		// Still verifying with nothing new: no write, the next poll comes soon.
		return false, nil
	}
	return true, nil
}

// callRecord describes the Fence call step is about to send; a re-issue (the outcome of
// the same try was lost to a crash or an API server outage) names the call before it.
func (c *Controller) callRecord(nf *v1alpha1.NodeFence, node *corev1.Node, step fencer.Step) string {
	msg := fmt.Sprintf("level %d agent %s try %d: Fence off, target %s", step.Level, step.Agent, step.Try, c.caller.targetFor(step.Agent, node))
	for _, a := range nf.Status.Attempts {
		if a.Level == step.Level && a.Agent == step.Agent && a.Try == step.Try && a.State == v1alpha1.AttemptFencing {
			msg += fmt.Sprintf("; re-issued: the outcome of the call sent at %s was lost", stampMicro(a.Started.Time))
		}
	}
	return msg
}

func (c *Controller) applyAndSave(ctx context.Context, nf *v1alpha1.NodeFence, plan fencer.Plan, ev fencer.Event) error {
	if err := fencer.Apply(&nf.Status, plan, ev, c.now()); err != nil {
		return fmt.Errorf("incident %s: %w", nf.Name, err)
	}
	return c.save(ctx, nf)
}

func method(step fencer.Step) string {
	if step.Kind == fencer.DoVerify {
		return methodStatus
	}
	return methodFence
}

func lastStepIs(nf *v1alpha1.NodeFence, typ, contains string) bool {
	tl := nf.Status.Timeline
	return len(tl) > 0 && tl[len(tl)-1].Type == typ && strings.Contains(tl[len(tl)-1].Message, contains)
}

// lastUnfenceFailure is the message of agent's latest UnfenceFailed step since its last
// successful Unfence, or "".
func lastUnfenceFailure(nf *v1alpha1.NodeFence, agent string) string {
	prefix := "agent " + agent + " "
	tl := nf.Status.Timeline
	for i := len(tl) - 1; i >= 0; i-- {
		if !strings.HasPrefix(tl[i].Message, prefix) {
			continue
		}
		switch tl[i].Type {
		case v1alpha1.StepUnfenceFailed:
			return tl[i].Message
		case v1alpha1.StepUnfenced:
			return ""
		}
	}
	return ""
}

func lastAttempt(nf *v1alpha1.NodeFence) *v1alpha1.Attempt {
	if len(nf.Status.Attempts) == 0 {
		return nil
	}
	return &nf.Status.Attempts[len(nf.Status.Attempts)-1]
}

// fenced records the verified fence and releases the node's workloads.
func (c *Controller) fenced(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy) (time.Duration, error) {
	now := c.now()
	nf.Status.Phase = v1alpha1.PhaseFenced
	c.step(ctx, nf, now, v1alpha1.StepVerified, fmt.Sprintf("level %d read back as fenced", nf.Status.VerifiedLevel))
	if a := lastAttempt(nf); a != nil {
		c.metrics.phaseDuration.WithLabelValues(durationFence).Observe(now.Sub(a.Started.Time).Seconds())
	}
	c.metrics.incidents.WithLabelValues(string(v1alpha1.PhaseFenced)).Inc()
	c.event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonFenced, "Node %s verified fenced at level %d", node.Name, nf.Status.VerifiedLevel)
	// Written by release's first checkpoint, before anything is released.
	return c.release(ctx, nf, node, pol)
}

// remediator acts for nf: its steps go to nf's timeline, its checkpoints save nf.
func (c *Controller) remediator(ctx context.Context, nf *v1alpha1.NodeFence) remediate.Remediator {
	r := *c.remedy
	r.OnStep = func(step, msg string) { c.step(ctx, nf, c.now(), step, msg) }
	r.Checkpoint = func(ctx context.Context) error {
		err := c.save(ctx, nf)
		if err == nil && nf.Status.Phase == v1alpha1.PhaseFenced {
			c.pause.at(PauseAfterFenced)
		}
		return err
	}
	r.Before = func(ctx context.Context, action string) error {
		c.pause.at(action)
		return c.leaseConfirmed(ctx)
	}
	return r
}

// release carries out the policy's remediation for a verified incident. Its checkpoint
// writes the incident, checking the Lease first, before the first change to the cluster.
func (c *Controller) release(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy) (time.Duration, error) {
	start := c.now()
	r := c.remediator(ctx, nf)
	err := r.Release(ctx, nf, pol.Remediation, &nf.Status.Remediation)
	if errors.Is(err, remediate.ErrNodeRebooted) {
		nf.Status.Phase, nf.Status.Message = v1alpha1.PhaseRemediated, err.Error()
		c.step(ctx, nf, c.now(), v1alpha1.StepReleaseSkipped, err.Error())
		return 0, c.save(ctx, nf)
	}
	if err != nil {
		// Record what was done so far; the next try resumes from it.
		if serr := c.save(ctx, nf); serr != nil {
			klog.FromContext(ctx).Error(serr, "Recording partial remediation")
		}
		return 0, fmt.Errorf("incident %s: %w", nf.Name, err)
	}
	now := c.now()
	nf.Status.Phase = v1alpha1.PhaseRemediated
	c.step(ctx, nf, now, v1alpha1.StepRemediated, fmt.Sprintf("strategy %s: taints added %v, %d pods and %d volume attachments deleted",
		pol.Remediation, nf.Status.Remediation.TaintsAdded, len(nf.Status.Remediation.PodsDeleted), len(nf.Status.Remediation.VolumeAttachmentsDeleted)))
	c.metrics.phaseDuration.WithLabelValues(durationRemediate).Observe(now.Sub(start).Seconds())
	c.metrics.incidents.WithLabelValues(string(v1alpha1.PhaseRemediated)).Inc()
	c.event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonRemediated, "Released workloads of node %s", node.Name)
	if err := c.save(ctx, nf); err != nil {
		return 0, err
	}
	if action(nf, pol) == v1alpha1.ActionReboot {
		// Only now that its workloads are released is the node powered on again; it comes
		// back with a new boot and the incident closes through recovery.
		c.powerOn(ctx, nf, node)
	}
	return 0, nil
}

func action(nf *v1alpha1.NodeFence, pol *v1alpha1.Policy) v1alpha1.FenceAction {
	if nf.Spec.Action != "" {
		return nf.Spec.Action
	}
	return pol.Action
}

// powerOn asks the agents that fenced the node to undo it, for the Reboot action. A
// failure is recorded, not retried: the node stays off, which is safe, until a person acts.
func (c *Controller) powerOn(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node) {
	for _, at := range verifiedAttempts(nf) {
		res, err := c.caller.unfence(ctx, at, node, c.currentEpoch())
		if err != nil {
			_, msg := unfenceFailure(at.Agent, "power on", res, err)
			c.step(ctx, nf, c.now(), v1alpha1.StepUnfenceFailed, msg)
			continue
		}
		c.step(ctx, nf, c.now(), v1alpha1.StepPoweredOn, fmt.Sprintf("agent %s reports %s: %s", at.Agent, res.State, res.Evidence))
	}
	if err := c.save(ctx, nf); err != nil {
		klog.FromContext(ctx).Error(err, "Recording power on")
	}
}

// recover closes an incident once its node is back with a new boot: it undoes the fence
// (power on is idempotent for a node that booted; storage access is restored exactly as
// recorded) and removes the taints kubefence added. A node that reports Ready with the
// boot it had when it was verified fenced contradicts the fence: that is raised loudly and
// nothing is undone.
func (c *Controller) recover(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, obs detector.Observation) (time.Duration, error) {
	if obs.Health != detector.Healthy || !nodeReady(node) || obs.BootID == "" {
		return 0, nil
	}
	if obs.BootID == nf.Status.BootID {
		// Healthy and Ready alone prove nothing here: a new leader restarts the Lease
		// clocks, and kube-controller-manager takes a while to mark a dead node's Ready
		// Unknown. A Lease renewal after the fence is not enough either: a kubelet that
		// just rebooted renews its Lease before it posts the status with its new boot ID.
		// Only one coherent observation proves the same boot ran on: a renewal and a
		// status, both seen by this process after the fence held, the status still
		// carrying the fenced boot ID.
		verified := fenceVerifiedAt(nf)
		if verified.IsZero() || !obs.RenewalSeen.After(verified) || !obs.StatusSeen.After(verified) {
			return 0, nil
		}
		return 0, c.contradiction(ctx, nf, node)
	}
	c.clearContradiction(ctx, nf, obs)
	if err := c.checkLease(ctx); err != nil {
		return 0, err
	}
	for _, at := range verifiedAttempts(nf) {
		res, err := c.caller.unfence(ctx, at, node, c.currentEpoch())
		if err != nil {
			// Nothing is released on a failed Unfence, whatever was read back after it:
			// the try is retried with backoff, and the timeline records each new state
			// read back, not every try.
			if key, msg := unfenceFailure(at.Agent, methodUnfence, res, err); !strings.HasPrefix(lastUnfenceFailure(nf, at.Agent), key) {
				c.step(ctx, nf, c.now(), v1alpha1.StepUnfenceFailed, msg)
				if serr := c.save(ctx, nf); serr != nil {
					err = errors.Join(err, serr)
				}
			}
			return 0, fmt.Errorf("incident %s: unfence agent %s: %w", nf.Name, at.Agent, err)
		}
		c.step(ctx, nf, c.now(), v1alpha1.StepUnfenced, fmt.Sprintf("agent %s reports %s: %s", at.Agent, res.State, res.Evidence))
	}
	r := c.remediator(ctx, nf)
	if err := r.RemoveTaints(ctx, node.Name, &nf.Status.Remediation); err != nil {
		return 0, fmt.Errorf("incident %s: %w", nf.Name, err)
	}
	now := c.now()
	nf.Status.Phase = v1alpha1.PhaseRecovered
	c.step(ctx, nf, now, v1alpha1.StepRecovered, fmt.Sprintf("node Ready with new boot ID %s", obs.BootID))
	c.metrics.incidents.WithLabelValues(string(v1alpha1.PhaseRecovered)).Inc()
	c.event(node, nf, corev1.EventTypeNormal, v1alpha1.ReasonRecovered, "Node %s is back with a new boot; incident %s closed", node.Name, nf.Name)
	return 0, c.save(ctx, nf)
}

// releaseLate releases pods bound to a fenced node after its incident was remediated.
// The fenced taint keeps the scheduler off the node, but a scheduler working from a
// stale cache (after an API server restart, say) can still bind a pod there, where it
// would wait for a machine that is off until kube-controller-manager's eviction gets to
// it. Only a pod that does not tolerate the fenced taint sets this off, and the pods go
// only after every agent that fenced the node reads the fence back as still holding.
func (c *Controller) releaseLate(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, obs detector.Observation, pol *v1alpha1.Policy) (time.Duration, error) {
	if pol.Remediation == v1alpha1.StrategyOutOfServiceTaint || (obs.BootID != "" && obs.BootID != nf.Status.BootID) {
		// Kubernetes itself releases an out-of-service node's pods; a new boot is recovery's.
		return 0, nil
	}
	var late []string
	for _, p := range c.podsOn(node.Name) {
		if !lateBound(p, node.Name) {
			continue
		}
		// The cache can still hold a pod this release (or the last) just deleted: only a
		// pod the API server still has, bound here, counts.
		live, err := c.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && !lateBound(live, node.Name)) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("incident %s: read pod %s/%s bound to the fenced node: %w", nf.Name, p.Namespace, p.Name, err)
		}
		late = append(late, p.Namespace+"/"+p.Name)
	}
	if len(late) == 0 {
		return 0, nil
	}
	if err := c.checkLease(ctx); err != nil {
		return 0, err
	}
	var reads []string
	for _, at := range verifiedAttempts(nf) {
		step := fencer.Step{Kind: fencer.DoVerify, Level: at.Level, Agent: at.Agent, Try: at.Try}
		ev := c.caller.call(ctx, step, node, c.currentEpoch(), c.now().Add(time.Minute))
		if ev.Err != nil || ev.State != fencer.StateFenced {
			msg := fmt.Sprintf("pods %v were bound to the node after its release and are left alone: agent %s does not read the fence back (state %q, error %v)",
				late, at.Agent, ev.State, ev.Err)
			if lastStepIs(nf, v1alpha1.StepLateReleaseRefused, msg) {
				return 0, nil
			}
			c.step(ctx, nf, c.now(), v1alpha1.StepLateReleaseRefused, msg)
			c.event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonLateReleaseRefused, "%s", msg)
			return 0, c.save(ctx, nf)
		}
		reads = append(reads, fmt.Sprintf("agent %s reads %s", at.Agent, ev.State))
	}
	msg := fmt.Sprintf("pods %v were bound to the fenced node after its release; %s", late, strings.Join(reads, ", "))
	c.step(ctx, nf, c.now(), v1alpha1.StepLateRelease, msg)
	c.event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonLateRelease, "%s", msg)
	r := c.remediator(ctx, nf)
	if err := r.Release(ctx, nf, pol.Remediation, &nf.Status.Remediation); err != nil {
		if serr := c.save(ctx, nf); serr != nil {
			klog.FromContext(ctx).Error(serr, "Recording late release")
		}
		return 0, fmt.Errorf("incident %s: late release: %w", nf.Name, err)
	}
	return 0, c.save(ctx, nf)
}

// lateBound reports whether pod, bound to node, is one releaseLate releases: not done, not
// a static pod's mirror, and not tolerating the fenced taint.
func lateBound(pod *corev1.Pod, node string) bool {
	_, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]
	return pod.Spec.NodeName == node && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed &&
		!mirror && !policy.Tolerates(pod, &remediate.FencedTaint)
}

// ConditionContradiction is set on an incident whose node reports Ready with the same
// boot ID after it was verified fenced: either the agent's verification or the node's
// identity is wrong, and a person must look before anything is undone.
const ConditionContradiction = "FenceContradicted"

// Reasons of ConditionContradiction.
const (
	// conditionReasonSameBoot raises it: the node is Ready on the boot it had when fenced.
	conditionReasonSameBoot = "SameBootAfterFence"
	// conditionReasonRebooted lowers it: the node came back with a new boot after all.
	conditionReasonRebooted = "RebootedAfterAll"
)

func (c *Controller) contradiction(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node) error {
	if meta.IsStatusConditionTrue(nf.Status.Conditions, ConditionContradiction) {
		return nil
	}
	msg := fmt.Sprintf("node %s reports Ready with boot ID %s, the boot it had when it was verified fenced; nothing is unfenced",
		node.Name, nf.Status.BootID)
	meta.SetStatusCondition(&nf.Status.Conditions, metav1.Condition{Type: ConditionContradiction, Status: metav1.ConditionTrue,
		Reason: conditionReasonSameBoot, Message: msg, ObservedGeneration: nf.Generation})
	c.step(ctx, nf, c.now(), v1alpha1.StepContradiction, msg)
	c.metrics.contradictions.Inc()
	c.event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonFenceContradicted, "%s", msg)
	klog.FromContext(ctx).Error(nil, "Fence contradicted", "bootID", nf.Status.BootID)
	return c.save(ctx, nf)
}

// clearContradiction lowers a FenceContradicted condition once the node turns out to have
// rebooted after all: the alarm stays in the timeline, not on a Recovered incident.
func (c *Controller) clearContradiction(ctx context.Context, nf *v1alpha1.NodeFence, obs detector.Observation) {
	if !meta.IsStatusConditionTrue(nf.Status.Conditions, ConditionContradiction) {
		return
	}
	msg := fmt.Sprintf("node came back with a new boot ID %s (fenced boot %s): it was power cycled after all",
		obs.BootID, nf.Status.BootID)
	meta.SetStatusCondition(&nf.Status.Conditions, metav1.Condition{Type: ConditionContradiction, Status: metav1.ConditionFalse,
		Reason: conditionReasonRebooted, Message: msg, ObservedGeneration: nf.Generation})
	c.step(ctx, nf, c.now(), v1alpha1.StepContradictionCleared, msg)
}

// verifiedAttempts returns the attempts that verified the incident's fence.
func verifiedAttempts(nf *v1alpha1.NodeFence) []v1alpha1.Attempt {
	var out []v1alpha1.Attempt
	for _, a := range nf.Status.Attempts {
		if a.Level == nf.Status.VerifiedLevel && a.State == v1alpha1.AttemptVerified {
			out = append(out, a)
		}
	}
	return out
}

// fenceVerifiedAt is when the last of the incident's verified attempts finished.
func fenceVerifiedAt(nf *v1alpha1.NodeFence) time.Time {
	var at time.Time
	for _, a := range verifiedAttempts(nf) {
		if a.Finished != nil && a.Finished.After(at) {
			at = a.Finished.Time
		}
	}
	return at
}

func nodeReady(node *corev1.Node) bool {
	for _, cnd := range node.Status.Conditions {
		if cnd.Type == corev1.NodeReady {
			return cnd.Status == corev1.ConditionTrue
		}
	}
	return false
}

// leaseConfirmed passes when a Lease check passed within the renew deadline, and checks
// the Lease again otherwise: each pod and VolumeAttachment deletion of a release follows
// a check that recent, without a read of the Lease for every one of them.
func (c *Controller) leaseConfirmed(ctx context.Context) error {
	if c.guard == nil || c.guard.Confirmed() {
		return nil
	}
	return c.checkLease(ctx)
}

// checkLease confirms, before an irreversible action, that this replica still leads at
// its epoch; a deposed replica stops at once.
func (c *Controller) checkLease(ctx context.Context) error {
	if c.guard == nil {
		return nil
	}
	err := c.guard.Check(ctx, c.currentEpoch(), c.now())
	switch {
	case errors.Is(err, ErrStaleEpoch) && c.opts.OnDeposed != nil:
		c.opts.OnDeposed(err)
	case err != nil && !errors.Is(err, ErrStaleEpoch):
		c.apiUnreachable.Store(true)
	}
	return err
}

// save persists the incident's status at this replica's epoch and keeps the fresh copy.
// The Lease is checked first: the resourceVersion only catches a newer leader that has
// already written this incident, not one that has not touched it yet.
func (c *Controller) save(ctx context.Context, nf *v1alpha1.NodeFence) error {
	if err := c.checkLease(ctx); err != nil {
		return err
	}
	saved, err := c.store.writeStatus(ctx, nf, c.currentEpoch(), c.opts.Identity)
	if err != nil {
		if errors.Is(err, ErrStaleEpoch) && c.opts.OnDeposed != nil {
			c.opts.OnDeposed(err)
		}
		return err
	}
	*nf = *saved
	c.flushEvents(nf.Name)
	return nil
}
