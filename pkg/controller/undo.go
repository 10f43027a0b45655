package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/plugin"
)

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
		return c.caller.Unfence(ctx, at, "", node, nf.Name, c.currentEpoch())
	}
	msg := fmt.Sprintf("agent %s %s, target %s", at.Agent, what, at.Target)
	if at.Target == "" {
		msg = fmt.Sprintf("agent %s %s, target as the node names it now (the fence recorded none)", at.Agent, what)
	}
	if !undoOnRecord(nf, at.Agent, msg) {
		c.step(ctx, nf, c.now(), v1alpha1.StepUnfenceCalled, msg)
	}
	if err := c.save(ctx, nf); err != nil {
		return notCalled, fmt.Errorf("agent %s %s %w: %w", at.Agent, what, errNotSent, err)
	}
	if err := c.checkLease(ctx); err != nil {
		return notCalled, fmt.Errorf("agent %s %s %w: %w", at.Agent, what, errNotSent, err)
	}
	point := PauseBeforeUnfence
	if what == undoPowerOn {
		point = PauseBeforePowerOn
	}
	c.lead.pause.at(point)
	if err := c.leaseConfirmed(ctx); err != nil {
		return notCalled, fmt.Errorf("agent %s %s %w: %w", at.Agent, what, errNotSent, err)
	}
	return c.caller.Unfence(ctx, at, restoreOf(nf, at), node, nf.Name, c.currentEpoch())
}

// undoOnRecord reports whether the agent's latest undo step already puts msg's call on
// record: the same call announced, or a retry of one that failed (the failure and the
// backoff say it is sent again).
func undoOnRecord(nf *v1alpha1.NodeFence, agent, msg string) bool {
	prefix := "agent " + agent + " "
	tl := nf.Status.Timeline
	for i := len(tl) - 1; i >= 0; i-- {
		if !strings.HasPrefix(tl[i].Message, prefix) {
			continue
		}
		switch tl[i].Type {
		case v1alpha1.StepUnfenceCalled:
			return tl[i].Message == msg
		case v1alpha1.StepUnfenceFailed:
			return true
		case v1alpha1.StepUnfenced, v1alpha1.StepPoweredOn:
			return false
		}
	}
	return false
}

// restoreOf is what an Unfence of at's agent restores: what every Fence call of that
// agent in the incident answered (an iSCSI agent's "removed:" lines), never a later read
// back. An incident recorded before FenceEvidence existed has only at's Evidence.
func restoreOf(nf *v1alpha1.NodeFence, at v1alpha1.Attempt) string {
	if ev := fencer.FenceEvidenceOf(&nf.Status, at.Agent); ev != "" {
		return ev
	}
	return at.Evidence
}
