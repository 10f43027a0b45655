package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/oncall"
)

// answerWord answers the first word a person set on nf and the loop has not answered
// (pkg/oncall decides): confirm-off, after a live read of the node's Lease, and cancel.
// node is nil when the Node object is gone. done says the sync ends here; an accepted
// confirm-off goes on, to the release.
func (c *Controller) answerWord(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy) (done bool, err error) {
	w, ok := oncall.Pending(nf)
	if !ok {
		return false, nil
	}
	if w.Kind == oncall.Cancel && node != nil {
		// Whether the node is gone decides what a cancel does: asked of the API server, as
		// a person who just deleted the Node object may be ahead of the cache.
		if _, err := c.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			node = nil
		} else if err != nil {
			return true, fmt.Errorf("incident %s: read node %s: %w", nf.Name, node.Name, err)
		}
	}
	f := oncall.Facts{NodeGone: node == nil}
	a := oncall.Decide(nf, w, f)
	if a.Act == oncall.ActReadLife {
		// The read the write discipline asks before every release: fresh from the API
		// server, compared with the renewal recorded when the incident opened.
		if f.Life, err = c.liveSignOfLife(ctx, nf, node, pol); err != nil {
			return true, err
		}
		f.LifeRead = true
		a = oncall.Decide(nf, w, f)
	}
	switch a.Act {
	case oncall.ActRefuse:
		c.step(ctx, nf, c.now(), a.Step, a.Message)
		c.event(node, nf, corev1.EventTypeWarning, v1alpha1.StepWordRefused, "%s", a.Message)
		return true, c.save(ctx, nf)
	case oncall.ActAccept:
		// The word goes on record first: it is what makes the incident verified.
		oncall.Accept(nf, w, a, c.now())
		if err := c.enter(ctx, nf, node, transition{to: a.Phase, message: &a.Message, count: true, step: a.Step, detail: a.Message,
			event: note{corev1.EventTypeWarning, a.Step, a.Message}}); err != nil {
			return true, err
		}
		if err := c.save(ctx, nf); err != nil {
			return true, err
		}
		return a.Phase != v1alpha1.PhaseFenced, nil
	}
	return false, nil
}

// waitingWord returns a copy of the node's incident that holds a word the loop answers
// though it does not drive the incident otherwise: a Failed one, or, with the Node
// object gone (gone), any open one. nil when there is none.
func (c *Controller) waitingWord(name string, gone bool) *v1alpha1.NodeFence {
	incs, err := c.store.ForNode(name)
	if err != nil {
		return nil // an incident the cache cannot decode fails the node's sync (store.Open)
	}
	if nf := oncall.Waiting(incs, gone); nf != nil {
		return nf.DeepCopy()
	}
	return nil
}

// pausedFence holds a Fence call that is due while fencing is paused: a retry, the next
// level, or the re-issue of a call whose outcome was lost. What was sent before stays
// sent and is still read back (DoVerify), and a verified fence is still released: the
// node is off either way, and holding its workloads would only prolong the outage. The
// call goes out at the first sync after the pause ends.
func (c *Controller) pausedFence(ctx context.Context, nf *v1alpha1.NodeFence, step fencer.Step, why string) (time.Duration, error) {
	msg := fmt.Sprintf("level %d agent %s try %d not sent: fencing is paused: %s", step.Level, step.Agent, step.Try, why)
	if lastStepIs(nf, v1alpha1.StepFencePaused, msg) {
		return fencer.HoldRecheck, nil
	}
	c.step(ctx, nf, c.now(), v1alpha1.StepFencePaused, msg)
	return fencer.HoldRecheck, c.save(ctx, nf)
}
