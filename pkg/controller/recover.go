package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/testpoint"
)

// recover closes an incident once its node is back with a new boot: it undoes the fence
// (power on is idempotent for a node that booted; storage access is restored exactly as
// recorded) and removes the taints kubefence added. A node that reports Ready with the
// boot it had when it was verified fenced contradicts the fence: that is raised loudly and
// nothing is undone.
func (c *Controller) recover(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, obs detector.Observation) (time.Duration, error) {
	c.clearContradiction(ctx, nf, obs)
	for _, at := range c.attemptsToUndo(nf) {
		res, err := c.undo(ctx, nf, node, at, undoUnfence)
		if errors.Is(err, errNotSent) {
			return 0, fmt.Errorf("incident %s: %w", nf.Name, err)
		}
		if err != nil {
			// Nothing is released on a failed Unfence, whatever was read back after it:
			// the try is retried with backoff, and the timeline records each new state
			// read back, not every try.
			if msg, repeat := incidents.UnfenceFailure(&nf.Status, at.Agent, fencecall.MethodUnfence, string(res.State), res.Evidence, err); !repeat {
				c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepUnfenceFailed, msg)
				if serr := c.record.Save(ctx, nf); serr != nil {
					err = errors.Join(err, serr)
				}
			}
			return 0, fmt.Errorf("incident %s: unfence agent %s: %w", nf.Name, at.Agent, err)
		}
		c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepUnfenced, fmt.Sprintf("agent %s reports %s: %s", at.Agent, res.State, res.Evidence))
	}
	r := c.releaserFor(ctx, nf)
	if _, err := r.RemoveTaints(ctx, nf.Name, node.Name, &nf.Status.Remediation); err != nil {
		return 0, fmt.Errorf("incident %s: %w", nf.Name, err)
	}
	if err := c.enter(ctx, nf, node, transition{to: v1alpha1.PhaseRecovered, count: true,
		step: v1alpha1.StepRecovered, detail: fmt.Sprintf("node Ready with new boot ID %s", obs.BootID),
		event: note{corev1.EventTypeNormal, v1alpha1.ReasonRecovered, fmt.Sprintf("Node %s is back with a new boot; incident %s closed", node.Name, nf.Name)}}); err != nil {
		return 0, err
	}
	return 0, c.record.Save(ctx, nf)
}

// attemptsToUndo are the attempts recovery undoes: the verified ones, and one attempt of
// each NetworkFence agent the incident called that verified none. A NetworkFence holds
// whether or not its level was verified (a level that timed out, a partner of mode any),
// and a node back on a new boot must get its storage back.
func (c *Controller) attemptsToUndo(nf *v1alpha1.NodeFence) []v1alpha1.Attempt {
	out := fencer.VerifiedAttempts(&nf.Status)
	seen := map[string]bool{}
	for _, at := range out {
		seen[at.Agent] = true
	}
	for _, at := range nf.Status.Attempts {
		if c.caller.NetworkFence(at.Agent) && !seen[at.Agent] {
			seen[at.Agent] = true
			out = append(out, at)
		}
	}
	return out
}

// Reasons of v1alpha1.ConditionContradiction.
const (
	// conditionReasonSameBoot raises it: the node is Ready on the boot it had when fenced.
	conditionReasonSameBoot = "SameBootAfterFence"
	// conditionReasonRebooted lowers it: the node came back with a new boot after all.
	conditionReasonRebooted = "RebootedAfterAll"
)

func (c *Controller) contradiction(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node) error {
	msg := fmt.Sprintf("node %s reports Ready with boot ID %s, the boot it had when it was verified fenced; nothing is unfenced",
		node.Name, nf.Status.BootID)
	meta.SetStatusCondition(&nf.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionContradiction, Status: metav1.ConditionTrue,
		Reason: conditionReasonSameBoot, Message: msg, ObservedGeneration: nf.Generation})
	c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepContradiction, msg)
	c.metrics.Contradictions.Inc()
	c.record.Event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonFenceContradicted, "%s", msg)
	klog.FromContext(ctx).Error(nil, "Fence contradicted", "bootID", nf.Status.BootID)
	return c.record.Save(ctx, nf)
}

// clearContradiction lowers a FenceContradicted condition once the node turns out to have
// rebooted after all: the alarm stays in the timeline, not on a Recovered incident.
func (c *Controller) clearContradiction(ctx context.Context, nf *v1alpha1.NodeFence, obs detector.Observation) {
	if !meta.IsStatusConditionTrue(nf.Status.Conditions, v1alpha1.ConditionContradiction) {
		return
	}
	msg := fmt.Sprintf("node came back with a new boot ID %s (fenced boot %s): it was power cycled after all",
		obs.BootID, nf.Status.BootID)
	meta.SetStatusCondition(&nf.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionContradiction, Status: metav1.ConditionFalse,
		Reason: conditionReasonRebooted, Message: msg, ObservedGeneration: nf.Generation})
	c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepContradictionCleared, msg)
}

// What an undo call does, for its record and its pause point.
const (
	undoUnfence = "Unfence"
	undoPowerOn = "power on"
)

// errNotSent marks an undo call that was not sent: its record could not be saved, or
// the leader Lease not confirmed.
var errNotSent = errors.New("not sent")

// undo sends an agent's Unfence for attempt at: recovery's, which gives a node back its
// storage (and power), or the Reboot action's power on. It is guarded exactly as a Fence
// is (invariant 11), since a deposed leader's late Unfence can lift the fence its
// successor holds on a node that failed again: the call goes on the incident's record
// first, in a save checked on resourceVersion and epoch (a successor that wrote the
// incident since stops it there); then the leader Lease is read fresh; and past a
// possible pause (a stopped process, a frozen VM), a check within the renew deadline
// confirms the replica still leads. The call goes to the target the fence went to, and
// restores what the agent's Fence calls said they removed.
func (c *Controller) undo(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, at v1alpha1.Attempt, what string) (plugin.Result, error) {
	notCalled := plugin.Result{State: plugin.StateUnknown, Evidence: "nothing read back: the call was never made"}
	if at.Agent == v1alpha1.WatchdogAgent {
		return c.caller.Unfence(ctx, at, "", node, nf.Name, c.lead.guard.Epoch())
	}
	msg := fmt.Sprintf("agent %s %s, target %s", at.Agent, what, at.Target)
	if at.Target == "" {
		msg = fmt.Sprintf("agent %s %s, target as the node names it now (the fence recorded none)", at.Agent, what)
	}
	if !incidents.UndoOnRecord(&nf.Status, at.Agent, msg) {
		c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepUnfenceCalled, msg)
	}
	if err := c.record.Save(ctx, nf); err != nil {
		return notCalled, fmt.Errorf("agent %s %s %w: %w", at.Agent, what, errNotSent, err)
	}
	if err := c.lead.guard.Check(ctx); err != nil {
		return notCalled, fmt.Errorf("agent %s %s %w: %w", at.Agent, what, errNotSent, err)
	}
	point := testpoint.BeforeUnfence
	if what == undoPowerOn {
		point = testpoint.BeforePowerOn
	}
	c.lead.pause.At(point)
	if err := c.lead.guard.Confirmed(ctx); err != nil {
		return notCalled, fmt.Errorf("agent %s %s %w: %w", at.Agent, what, errNotSent, err)
	}
	return c.caller.Unfence(ctx, at, fencer.RestoreOf(&nf.Status, at), node, nf.Name, c.lead.guard.Epoch())
}
