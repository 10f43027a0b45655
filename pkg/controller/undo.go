package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/testpoint"
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
