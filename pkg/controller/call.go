package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/selffence"
)

// callStep carries out a DoFence or DoVerify step of nf: a call to its agent, at the
// target its attempt recorded, or for a watchdog level, the controller's own check.
func (c *Controller) callStep(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, step fencer.Step, deadline time.Time) fencer.Event {
	if step.Agent == v1alpha1.WatchdogAgent {
		return c.watchdogEvent(nf, node, step)
	}
	target := ""
	if a := fencer.AttemptOf(&nf.Status, step.Level, step.Agent, step.Try); a != nil {
		target = a.Target
	}
	return c.caller.Call(ctx, step, node, target, nf.Name, c.lead.guard.Epoch(), deadline)
}

// watchdogEvent carries out a step of a watchdog level: nothing is sent anywhere. The
// request is the incident itself, past its budget and so held by every node agent that
// reads it; the call only checks that the node's watchdog can be counted on, and each
// read back asks whether the node must have reset by now.
func (c *Controller) watchdogEvent(nf *v1alpha1.NodeFence, node *corev1.Node, step fencer.Step) fencer.Event {
	ev := fencer.Event{Kind: fencer.FenceReturned, Level: step.Level, Agent: step.Agent, Try: step.Try}
	if step.Kind == fencer.DoVerify {
		ev.Kind = fencer.StateRead
	}
	v, err := c.peers.agents.Verdict(nf, node, step.Kind == fencer.DoVerify)
	if err != nil {
		ev.Err, ev.ErrKind = err, plugin.KindRetryable
		return ev
	}
	ev.Evidence = v.Reason
	switch {
	case v.State == selffence.Ineligible && step.Kind == fencer.DoFence:
		ev.Err, ev.ErrKind = fmt.Errorf("watchdog level: %s", v.Reason), plugin.KindPermanent
	case step.Kind == fencer.DoFence:
		ev.State, ev.Evidence = string(plugin.StateUnknown), "the incident is the request; the node's agent stops feeding its watchdog once it reads it: "+v.Reason
	case v.State == selffence.Verified:
		ev.State = fencer.StateFenced
	case v.State == selffence.Contradicted:
		// The node lived on past its reset: its watchdog cannot be counted on. The
		// attempt fails now and nothing is released.
		ev.Kind, ev.State = fencer.Contradicted, string(plugin.StateOn)
		c.record.Event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonFenceContradicted, "Watchdog fence of node %s contradicted: %s", node.Name, v.Reason)
	}
	return ev
}
