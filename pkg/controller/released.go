package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/remediate"
)

// releasedBefore finds the release an earlier leader made for nf and did not live to
// record: taints on the node that its owner mark gives to nf (read from the API server,
// which has the mark in the same update as each taint). A release runs only after a
// verified fence (invariant 1), so the mark is proof that one held, even when the
// record of its read back was lost and the fence cannot be read back now (a BMC that
// died with the node). It returns the marked keys, none when there are none.
func (c *Controller) releasedBefore(ctx context.Context, nf *v1alpha1.NodeFence) ([]string, error) {
	n, err := c.client.CoreV1().Nodes().Get(ctx, nf.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("incident %s: read node %s for its release: %w", nf.Name, nf.Spec.NodeName, err)
	}
	return remediate.Owned(n, nf.Name), nil
}

// resumeRelease records the fence an earlier leader verified before it released the node
// (releasedBefore found its taints) and carries the release on: the attempts of the last
// level issued that are still Fencing or Verifying on record (or, when this replica's
// own tries have failed them since, each agent's first try at that level) are recorded
// verified, with the evidence that says how it is known; the incident moves to Fenced,
// is released (resuming from the owner mark) and Remediated, never Failed with "nothing
// was released". It reports false, doing nothing, when the incident has no attempt.
func (c *Controller) resumeRelease(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy, marked []string) (bool, time.Duration, error) {
	picked := fencer.VerifiedBefore(&nf.Status)
	if len(picked) == 0 {
		return false, 0, nil
	}
	now := metav1.NewMicroTime(c.now())
	why := fmt.Sprintf("verified by an earlier leader: node %s carries taints %s this incident added after a verified fence (owner mark %s); the record of the read back was lost with that leader",
		node.Name, strings.Join(marked, ","), remediate.OwnerAnnotation)
	for _, i := range picked {
		a := &nf.Status.Attempts[i]
		a.State, a.Finished, a.Error, a.ErrorKind, a.Evidence = v1alpha1.AttemptVerified, &now, "", "", why
	}
	level := nf.Status.Attempts[picked[0]].Level
	nf.Status.Level, nf.Status.VerifiedLevel = level, level
	c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepReleaseFound, fmt.Sprintf("level %d %s", level, why))
	requeue, err := c.fenced(ctx, nf, node, pol)
	return true, requeue, err
}
