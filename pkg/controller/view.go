package controller

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/caches"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/maintenance"
	"github.com/kubefence/kubefence/pkg/policy"
)

// podsOn returns the cached pods bound to a node.
func (c *Controller) podsOn(node string) []*corev1.Pod { return caches.PodsOn(c.caches.pods, node) }

// view is what policy and detector say of one node under policy pol at now: the node's
// own thresholds shrink with its pods' forgiveness and PDB urgency (never below the
// policy's minWait), so the observation is taken with them.
func (c *Controller) view(pol *v1alpha1.Policy, n *corev1.Node, now time.Time) (policy.Node, detector.Observation) {
	pods := c.podsOn(n.Name)
	pn, obs := c.health(pol, n, pods, c.urgentPDBs(), now, false)
	pn.NothingToRelease = policy.NothingToRelease(pods, c.attachmentsOf(n.Name))
	pn.ControllerHere, pn.ControllerHereUntil = c.peers.replicas.On(n.Name, now)
	pn.TargetReadsOff = n.Annotations[v1alpha1.TargetReadsOffAnnotation]
	pn.Maintenance = maintenance.Signal(n, pol.Maintenance.Cordoned, pn.NothingToRelease, c.peers.maintenance.Objects(n.Name))
	pn.SilentSince = obs.Since
	for _, f := range c.store.FactsForNode(n.Name) {
		if f.Phase == v1alpha1.PhaseFencing {
			pn.Fencing = true
		}
		if f.Phase.Open() {
			pn.Incident = true
			// The silence an open incident recorded outlasts this replica's clocks.
			pn.SilentSince = maintenance.Earlier(pn.SilentSince, f.EvidenceStart)
		}
		// The cooldown follows a fence that held; a failed one is the Failed rule's
		// (failedUnrecovered), not a fence.
		if f.Verified && f.FenceStart.After(pn.LastFencedAt) {
			pn.LastFencedAt = f.FenceStart
		}
	}
	return pn, obs
}

// health is the part of a node's view that a decision about another node surveys: its
// labels and its health with its own thresholds. pdbs are urgentPDBs. A survey
// (detector.SurveyWith) leaves the observation's evidence in words out.
func (c *Controller) health(pol *v1alpha1.Policy, n *corev1.Node, pods []*corev1.Pod, pdbs []*policyv1.PodDisruptionBudget, now time.Time, survey bool) (policy.Node, detector.Observation) {
	pn := policy.ForNode(pol, n, pods, pdbs)
	det := c.cfg.Detection
	assess := c.detector.AssessWith
	if survey {
		assess = c.detector.SurveyWith
	}
	obs := assess(n, now,
		policy.Threshold(pol, pn, det.LeaseStaleAfter.Duration), policy.Threshold(pol, pn, det.NotReadyAfter.Duration))
	pn.Unhealthy = obs.Health == detector.Unhealthy
	pn.Suspect = obs.Health == detector.Suspect || obs.Health == detector.Flapping
	pn.UnhealthyAt = obs.UnhealthyAt
	return pn, obs
}

// urgentPDBs are the cached PodDisruptionBudgets that allow no disruption now.
func (c *Controller) urgentPDBs() []*policyv1.PodDisruptionBudget {
	return caches.UrgentPDBs(c.caches.pdbs)
}

func (c *Controller) attachmentsOf(node string) int {
	return caches.AttachmentsOn(c.caches.attachments, node)
}

// markPods sets or clears the NodeUnreachable condition on the node's pods, so that users
// and tools see why they are stuck. A patch merges by condition type: the kubelet's own
// conditions stay.
func (c *Controller) markPods(ctx context.Context, obs detector.Observation, now time.Time) {
	cond := detector.PodCondition(obs, now)
	checked := false
	for _, pod := range c.podsOn(obs.Node) {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if _, changed := detector.SetPodCondition(pod.Status.Conditions, cond); !changed {
			continue
		}
		if !checked {
			if c.checkLease(ctx) != nil {
				// Not confirmed as leader: no patch. checkLease has acted on a deposition,
				// and the next sync marks the pods again.
				return
			}
			checked = true
		}
		patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
		if err != nil {
			return // a PodCondition always encodes
		}
		_, err = c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{}, "status")
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Marking pod of unreachable node", "pod", klog.KObj(pod), "err", err)
		}
	}
}

// wouldFence reports a dry-run decision once per unhealthy episode of a node.
func (c *Controller) wouldFence(ctx context.Context, node *corev1.Node, obs detector.Observation, d policy.Decision) {
	key := obs.Since.String()
	c.decide.mu.Lock()
	episodes := c.decide.dryRunSeen[node.Name]
	if episodes == nil {
		episodes = map[string]bool{}
		c.decide.dryRunSeen[node.Name] = episodes
	}
	seen := episodes[key]
	episodes[key] = true
	c.decide.mu.Unlock()
	if seen {
		return
	}
	c.metrics.WouldFence.Inc()
	if c.events.recorder != nil && c.checkLease(ctx) == nil {
		c.events.recorder.Eventf(node, corev1.EventTypeWarning, v1alpha1.ReasonWouldFence, "Dry run: would fence node %s: %s (%s)",
			node.Name, obs.Evidence, d.Message)
	}
	klog.FromContext(ctx).Info("Dry run: would fence", "evidence", obs.Evidence)
}

// forgetDryRun forgets the episodes reported in dry run for a node that is healthy again
// or deleted; its next unhealthy episode is reported anew.
func (c *Controller) forgetDryRun(node string) {
	c.decide.mu.Lock()
	delete(c.decide.dryRunSeen, node)
	c.decide.mu.Unlock()
}

func dryRun(cfg *v1alpha1.Config, pol *v1alpha1.Policy) bool { return cfg.DryRun || pol.DryRun }
