package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/oncall"
)

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
	if _, obs := c.view(pol, node, now); obs.Health != detector.Unhealthy {
		return "its Lease, read from the API server, shows it healthy: " + obs.Evidence, nil
	}
	return "", nil
}

// cancel ends an incident that has not started fencing, on a sign of life.
func (c *Controller) cancel(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, life string) error {
	msg := "node alive before fencing started: " + life
	if err := c.enter(ctx, nf, node, transition{to: v1alpha1.PhaseCancelled, message: &msg, count: true,
		step: v1alpha1.StepCancelled, detail: msg, event: note{corev1.EventTypeNormal, v1alpha1.ReasonCancelled,
			fmt.Sprintf("Node %s is alive (%s); incident %s cancelled before fencing", node.Name, life, nf.Name)}}); err != nil {
		return err
	}
	return c.record.Save(ctx, nf)
}

// failedUnrecovered returns why no automatic incident may open for node
// (oncall.NoNewIncident), or "" when one may: a sign of life is the Lease's since each
// incident opened (fencer.SignOfLife).
func (c *Controller) failedUnrecovered(node string, obs detector.Observation) string {
	incs, err := c.store.ForNode(node)
	if err != nil {
		// An incident the cache cannot decode fails the node's sync (openIncident) before
		// any new incident could open.
		return ""
	}
	return oncall.NoNewIncident(incs, obs.BootID, func(nf *v1alpha1.NodeFence) bool { return fencer.SignOfLife(nf, obs) != "" })
}
