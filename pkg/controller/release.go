package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/loopmetrics"
	"github.com/kubefence/kubefence/pkg/podrelease"
	"github.com/kubefence/kubefence/pkg/policy"
	"github.com/kubefence/kubefence/pkg/testpoint"
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
	return podrelease.Owned(n, nf.Name), nil
}

// resumeRelease carries on the release an earlier leader made for nf and did not live to
// record (releasedBefore finds its taints), instead of a fence again or a Failed with
// "nothing was released": it records the fence that leader verified (the attempts of the
// last level issued that are still Fencing or Verifying on record, or, when this
// replica's own tries have failed them since, each agent's first try at that level, with
// the evidence that says how it is known); the incident moves to Fenced, is released
// (resuming from the owner mark) and Remediated. It reports false, doing nothing, when no
// taint is marked for nf or the incident has no attempt, and true with the error when the
// node cannot be read.
func (c *Controller) resumeRelease(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy) (bool, time.Duration, error) {
	marked, err := c.releasedBefore(ctx, nf)
	if err != nil || len(marked) == 0 {
		return err != nil, 0, err
	}
	picked := fencer.VerifiedBefore(&nf.Status)
	if len(picked) == 0 {
		return false, 0, nil
	}
	now := metav1.NewMicroTime(c.now())
	why := fmt.Sprintf("verified by an earlier leader: node %s carries taints %s this incident added after a verified fence (owner mark %s); the record of the read back was lost with that leader",
		node.Name, strings.Join(marked, ","), podrelease.OwnerAnnotation)
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

// fenced records the verified fence and releases the node's workloads.
func (c *Controller) fenced(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy) (time.Duration, error) {
	if err := c.enter(ctx, nf, node, transition{to: v1alpha1.PhaseFenced, count: true,
		step: v1alpha1.StepVerified, detail: fmt.Sprintf("level %d read back as fenced", nf.Status.VerifiedLevel),
		event: note{corev1.EventTypeNormal, v1alpha1.ReasonFenced, fmt.Sprintf("Node %s verified fenced at level %d", node.Name, nf.Status.VerifiedLevel)}}); err != nil {
		return 0, err
	}
	if a := fencer.LastAttempt(&nf.Status); a != nil {
		c.metrics.PhaseDuration.WithLabelValues(loopmetrics.DurationFence).Observe(c.now().Sub(a.Started.Time).Seconds())
	}
	// Written with the release's end (Remediated), or with what it did if it fails.
	return c.release(ctx, nf, node, pol)
}

// release carries out the policy's remediation for a verified incident and saves it
// Remediated, or what it did when it fails. Nothing is saved before the first change: the
// taints carry their owner on the node (podrelease.OwnerAnnotation), and every change
// follows a Lease check passed within the renew deadline (Before).
func (c *Controller) release(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy) (time.Duration, error) {
	start := c.now()
	if nf.Status.Phase == v1alpha1.PhaseFenced {
		c.lead.pause.At(testpoint.AfterFenced)
	}
	r := c.releaserFor(ctx, nf)
	err := r.Release(ctx, nf, pol.Remediation, &nf.Status.Remediation)
	if errors.Is(err, podrelease.ErrNodeRebooted) {
		if err := c.enter(ctx, nf, node, transition{to: v1alpha1.PhaseRemediated, message: ptr.To(err.Error()),
			step: v1alpha1.StepReleaseSkipped, detail: err.Error()}); err != nil {
			return 0, err
		}
		return 0, c.record.Save(ctx, nf)
	}
	if err != nil {
		// Record what was done so far; the next try resumes from it.
		if serr := c.record.Save(ctx, nf); serr != nil {
			klog.FromContext(ctx).Error(serr, "Recording partial remediation")
		}
		return 0, fmt.Errorf("incident %s: %w", nf.Name, err)
	}
	rem := nf.Status.Remediation
	if err := c.enter(ctx, nf, node, transition{to: v1alpha1.PhaseRemediated, count: true, step: v1alpha1.StepRemediated,
		detail: fmt.Sprintf("strategy %s: taints added %v, %d pods and %d volume attachments deleted",
			pol.Remediation, rem.TaintsAdded, len(rem.PodsDeleted), len(rem.VolumeAttachmentsDeleted)),
		event: note{corev1.EventTypeNormal, v1alpha1.ReasonRemediated, fmt.Sprintf("Released workloads of node %s", node.Name)}}); err != nil {
		return 0, err
	}
	c.metrics.PhaseDuration.WithLabelValues(loopmetrics.DurationRemediate).Observe(c.now().Sub(start).Seconds())
	c.metrics.FailureToReleased.WithLabelValues(pol.Name).Observe(c.now().Sub(incidents.FailedAt(nf)).Seconds())
	c.lead.pause.At(testpoint.BeforeRecord)
	c.yieldToReleases(ctx)
	if err := c.record.Save(ctx, nf); err != nil {
		return 0, err
	}
	if fencer.ActionOf(nf, pol) == v1alpha1.ActionReboot {
		// Only now that its workloads are released is the node powered on again; it comes
		// back with a new boot and the incident closes through recovery.
		c.powerOn(ctx, nf, node)
	}
	return 0, nil
}

// powerOn asks the agents that powered the node off to power it on again, for the
// Reboot action. Only agents that power machines (their Describe offers reboot) are
// asked: a storage fence (iSCSI ACLs, a NetworkFence) must hold until the node is back
// on a new boot (invariant 8), and recovery undoes it then. A failure is recorded, not
// retried: the node stays off, which is safe, until a person acts.
func (c *Controller) powerOn(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node) {
	for _, at := range fencer.VerifiedAttempts(&nf.Status) {
		if why := c.caller.NotPowering(ctx, at.Agent); why != "" {
			c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepUnfenceSkipped, fmt.Sprintf("agent %s not asked to power the node on: %s", at.Agent, why))
			continue
		}
		res, err := c.undo(ctx, nf, node, at, undoPowerOn)
		if errors.Is(err, errNotSent) {
			klog.FromContext(ctx).Error(err, "Powering the node on")
			return // its record could not be saved, or the Lease not confirmed: nothing more is sent or written
		}
		if err != nil {
			msg, _ := incidents.UnfenceFailure(&nf.Status, at.Agent, undoPowerOn, string(res.State), res.Evidence, err)
			c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepUnfenceFailed, msg)
			continue
		}
		c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepPoweredOn, fmt.Sprintf("agent %s reports %s: %s", at.Agent, res.State, res.Evidence))
	}
	if err := c.record.Save(ctx, nf); err != nil {
		klog.FromContext(ctx).Error(err, "Recording power on")
	}
}

// releaseLate releases pods bound to a fenced node that its release did not: pods the
// release's cache did not show yet (it takes the node's pods from the informer), and
// pods bound after it. The fenced taint keeps the scheduler off the node, but a
// scheduler working from a stale cache (after an API server restart, say) can still bind
// a pod there, where it would wait for a machine that is off until
// kube-controller-manager's eviction gets to it. Only a pod that does not tolerate the fenced taint sets this off, and the pods go
// only after every agent that fenced the node reads the fence back as still holding.
func (c *Controller) releaseLate(ctx context.Context, nf *v1alpha1.NodeFence, node *corev1.Node, pol *v1alpha1.Policy) (time.Duration, error) {
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
	if err := c.lead.guard.Check(ctx); err != nil {
		return 0, err
	}
	var reads []string
	for _, at := range fencer.VerifiedAttempts(&nf.Status) {
		step := fencer.Step{Kind: fencer.DoVerify, Level: at.Level, Agent: at.Agent, Try: at.Try}
		ev := c.callStep(ctx, nf, node, step, c.now().Add(time.Minute))
		if ev.Err != nil || ev.State != fencer.StateFenced {
			msg := fmt.Sprintf("pods %v are bound to the node but were not released with it, and are left alone: agent %s does not read the fence back (state %q, error %v)",
				late, at.Agent, ev.State, ev.Err)
			if incidents.LastStepIs(&nf.Status, v1alpha1.StepLateReleaseRefused, msg) {
				return 0, nil
			}
			c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepLateReleaseRefused, msg)
			c.record.Event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonLateReleaseRefused, "%s", msg)
			return 0, c.record.Save(ctx, nf)
		}
		reads = append(reads, fmt.Sprintf("agent %s reads %s", at.Agent, ev.State))
	}
	msg := fmt.Sprintf("pods %v are bound to the fenced node but were not released with it; %s", late, strings.Join(reads, ", "))
	c.record.StepAt(ctx, nf, c.now(), v1alpha1.StepLateRelease, msg)
	c.record.Event(node, nf, corev1.EventTypeWarning, v1alpha1.ReasonLateRelease, "%s", msg)
	r := c.releaserFor(ctx, nf)
	if err := r.Release(ctx, nf, pol.Remediation, &nf.Status.Remediation); err != nil {
		if serr := c.record.Save(ctx, nf); serr != nil {
			klog.FromContext(ctx).Error(serr, "Recording late release")
		}
		return 0, fmt.Errorf("incident %s: late release: %w", nf.Name, err)
	}
	return 0, c.record.Save(ctx, nf)
}

// lateBound reports whether pod, bound to node, is one releaseLate releases: not done, not
// a static pod's mirror, and not tolerating the fenced taint.
func lateBound(pod *corev1.Pod, node string) bool {
	_, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]
	return pod.Spec.NodeName == node && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed &&
		!mirror && !policy.Tolerates(pod, &podrelease.FencedTaint)
}

// gateKey marks a context whose sync entered the gate.
type gateKey struct{}

// yieldToReleases holds the record of a release back while a storm's other releases are
// under way (pkg/releasegate): a storm is incidents.StormAt nodes fencing at once. Outside a
// storm, or in a sync that did not enter the gate, it returns at once.
func (c *Controller) yieldToReleases(ctx context.Context) {
	if entered, _ := ctx.Value(gateKey{}).(bool); !entered {
		return
	}
	if !c.record.Storm() {
		return
	}
	waited := c.decide.gate.Yield(ctx, c.queue.Len)
	klog.FromContext(ctx).V(2).Info("Release recorded after the storm's other releases", "waited", waited)
}
