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
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/policy"
)

const podsByNodeIndex = "byNode"

func podsByNode(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

// podsOn returns the cached pods bound to a node.
func (c *Controller) podsOn(node string) []*corev1.Pod {
	objs, err := c.caches.pods.GetIndexer().ByIndex(podsByNodeIndex, node)
	if err != nil {
		return nil // only for an index New did not add
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

// view is what policy and detector say of one node under policy pol at now: the node's
// own thresholds shrink with its pods' forgiveness and PDB urgency (never below the
// policy's minWait), so the observation is taken with them.
func (c *Controller) view(pol *v1alpha1.Policy, n *corev1.Node, now time.Time) (policy.Node, detector.Observation) {
	pods := c.podsOn(n.Name)
	pn, obs := c.health(pol, n, pods, c.urgentPDBs(), now, false)
	pn.NothingToRelease = policy.NothingToRelease(pods, c.attachmentsOf(n.Name))
	pn.ControllerHere = c.peers.replicas.On(n.Name, now)
	pn.TargetReadsOff = n.Annotations[v1alpha1.TargetReadsOffAnnotation]
	for _, f := range c.store.FactsForNode(n.Name) {
		if f.Phase == v1alpha1.PhaseFencing {
			pn.Fencing = true
		}
		if f.Phase.Open() {
			pn.Incident = true
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

// urgentPDBs are the cached PodDisruptionBudgets that allow no disruption now: the only
// ones that can make a node urgent (policy.Urgent).
func (c *Controller) urgentPDBs() []*policyv1.PodDisruptionBudget {
	all, err := c.caches.pdbs.List(everything())
	if err != nil {
		return nil // a cache read that cannot fail on labels.Everything(); without PDBs no pod is urgent
	}
	out := all[:0:0]
	for _, pdb := range all {
		if pdb.Status.DisruptionsAllowed <= 0 {
			out = append(out, pdb)
		}
	}
	return out
}

func (c *Controller) attachmentsOf(node string) int {
	vas, err := c.caches.attachments.List(everything())
	if err != nil {
		return 0 // a cache read that cannot fail on labels.Everything()
	}
	n := 0
	for _, va := range vas {
		if va.Spec.NodeName == node {
			n++
		}
	}
	return n
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
	c.metrics.wouldFence.Inc()
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
