package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/oncall"
)

// answerWord answers the first word a person set on nf and the loop has not answered
// (pkg/oncall decides): confirm-off and cancel, each once its author is known to be
// allowed to give it, a confirm-off once no sign says the node may be alive (readWord).
// node is nil when the Node object is gone. done says the sync ends here; an accepted
// confirm-off goes on, to the release.
func (c *Controller) answerWord(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy) (done bool, err error) {
	w, ok := oncall.Pending(nf)
	if !ok {
		return false, nil
	}
	f := oncall.Facts{NodeGone: node == nil}
	a := oncall.Decide(nf, w, f)
	if a.Act == oncall.ActRead {
		if f, err = c.readWord(ctx, nf, node, pol, w, f); err != nil {
			return true, err
		}
		if f.NodeGone {
			node = nil
		}
		a = oncall.Decide(nf, w, f)
	}
	switch a.Act {
	case oncall.ActRefuse:
		c.record.StepAt(ctx, nf, c.now(), a.Step, a.Message)
		c.record.Event(node, nf, corev1.EventTypeWarning, v1alpha1.StepWordRefused, "%s", a.Message)
		return true, c.record.Save(ctx, nf)
	case oncall.ActAccept:
		// The word goes on record first: it is what makes the incident verified.
		oncall.Accept(nf, w, a, c.now())
		if err := c.enter(ctx, nf, node, transition{to: a.Phase, message: &a.Message, count: true, step: a.Step, detail: a.Message,
			event: note{corev1.EventTypeWarning, a.Step, a.Message}}); err != nil {
			return true, err
		}
		if err := c.record.Save(ctx, nf); err != nil {
			return true, err
		}
		return a.Phase != v1alpha1.PhaseFenced, nil
	}
	return false, nil
}

// readWord makes the reads an answer to w waits on (oncall.ActRead): the API server's
// (oncall.Read: whether its author may give it, and whether a cancelled node is gone),
// and for a confirm-off every sign of the node's life: its Lease read live (the read
// the write discipline asks before every release, compared with the renewal recorded
// when the incident opened), a replica renewing on it, its agent's reports and its
// kubelet's answers.
func (c *Controller) readWord(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy, w oncall.Word, f oncall.Facts) (oncall.Facts, error) {
	f, err := oncall.Read(ctx, c.client, w, node, f)
	if err != nil || f.Denied != "" || w.Kind != oncall.ConfirmOff {
		return f, err
	}
	f.Life = c.peers.agents.Signs(node.Name, c.now())
	f.Life.Replica, _ = c.peers.replicas.On(node.Name, f.Life.At)
	f.Life.Kubelet, err = c.liveSignOfLife(ctx, nf, node, pol)
	return f, err
}

// waitingWord returns a copy of the node's incident that holds a word the loop answers
// though it does not drive the incident otherwise: a Failed one, or, with the Node
// object gone (gone), any open one. nil when there is none.
func (c *Controller) waitingWord(name string, gone bool) *v1alpha1.NodeFence {
	incs, err := c.store.ForNode(name)
	nf := oncall.Waiting(incs, gone)
	if err != nil || nf == nil {
		return nil // an incident the cache cannot decode fails the node's sync (store.Open)
	}
	return nf.DeepCopy()
}

// pausedFence holds a Fence call that is due while fencing is paused: a retry, the next
// level, or the re-issue of a call whose outcome was lost. What was sent before stays
// sent and is still read back (DoVerify), and a verified fence is still released: the
// node is off either way, and holding its workloads would only prolong the outage. The
// call goes out at the first sync after the pause ends.
func (c *Controller) pausedFence(ctx context.Context, nf *v1alpha1.NodeFence, step fencer.Step, why string) (time.Duration, error) {
	msg := fmt.Sprintf("level %d agent %s try %d not sent: fencing is paused: %s", step.Level, step.Agent, step.Try, why)
	if incidents.LastStepIs(&nf.Status, v1alpha1.StepFencePaused, msg) {
		return fencer.HoldRecheck, nil
	}
	c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepFencePaused, msg)
	return fencer.HoldRecheck, c.record.Save(ctx, nf)
}

// liveSignOfLife reads the node's Lease from the API server and compares it with the
// renewTime recorded when the incident opened. An incident that recorded none (its
// creator stopped before its first status write) is judged on this replica's own view
// of the node under pol, with the live read in it: it must still be unhealthy.
func (c *Controller) liveSignOfLife(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy) (string, error) {
	lease, err := c.client.CoordinationV1().Leases(NodeLeaseNamespace).Get(ctx, node.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("incident %s: read lease of node %s: %w", nf.Name, node.Name, err)
	}
	now := c.now()
	c.detector.ObserveLease(lease, now)
	if nf.Status.LeaseRenewTime != nil {
		return fencer.SignOfLife(nf, detector.Observation{Kubelet: detector.KubeletSeen{RenewTime: ptr.Deref(lease.Spec.RenewTime, metav1.MicroTime{}).Time}}), nil
	}
	if _, obs := c.sources().View(pol, node, now); obs.Health != detector.Unhealthy {
		return "its Lease, read from the API server, shows it healthy: " + obs.Evidence, nil
	}
	return "", nil
}
