package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/caches"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/nodeview"
	"github.com/kubefence/kubefence/pkg/policy"
)

func everything() labels.Selector { return labels.Everything() }

// podsOn returns the cached pods bound to a node.
func (c *Controller) podsOn(node string) []*corev1.Pod { return caches.PodsOn(c.caches.pods, node) }

// sources are the loop's inputs to a node's view and a decision on it (pkg/nodeview,
// which explain computes them with too): its caches and its peers.
func (c *Controller) sources() nodeview.Sources {
	return nodeview.Sources{Config: c.cfg, Detector: c.detector,
		Nodes:       func() ([]*corev1.Node, error) { return c.caches.nodes.List(everything()) },
		Pods:        c.podsOn,
		UrgentPDBs:  func() []*policyv1.PodDisruptionBudget { return caches.UrgentPDBs(c.caches.pdbs) },
		Attachments: func(node string) int { return caches.AttachmentsOn(c.caches.attachments, node) },
		Incidents:   c.store.Cached, IncidentsOf: c.store.FactsForNode, PausedBy: c.peers.pauses.Why,
		Agents: c.peers.agents, Replicas: c.peers.replicas, Maintenance: c.peers.maintenance}
}

// Sources are the loop's own sources, as the running leader answers explain from them
// (pkg/app's answer socket).
func (c *Controller) Sources() nodeview.Sources { return c.sources() }

// wouldFence reports a dry-run decision once per unhealthy episode of a node.
func (c *Controller) wouldFence(ctx context.Context, node *corev1.Node, obs detector.Observation, d policy.Decision) {
	if !c.decide.dryRunReports.First(node.Name, obs.Since.String()) {
		return
	}
	c.metrics.WouldFence.Inc()
	if c.record.Events != nil && c.lead.guard.Check(ctx) == nil {
		c.record.Event(node, nil, corev1.EventTypeWarning, v1alpha1.ReasonWouldFence, "Dry run: would fence node %s: %s (%s)",
			node.Name, obs.Evidence, d.Message)
	}
	klog.FromContext(ctx).Info("Dry run: would fence", "evidence", obs.Evidence)
}

func dryRun(cfg *v1alpha1.Config, pol *v1alpha1.Policy) bool { return cfg.DryRun || pol.DryRun }
