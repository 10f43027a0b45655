package oncall

import (
	"context"
	"fmt"
	"io"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/policy"
)

// Explainer answers "why is node X (not) fenced, and what happens next" from what the
// cluster holds: the leader's record (the node's incident: its evidence, the rule that
// holds it, its timeline) and a decision taken now by the same code the leader runs
// (pkg/detector for the evidence and threshold, pkg/policy for the rule). The detector
// here has watched nothing: it takes each Lease as seen at its renewTime, on the
// kubelet's clock, where the leader counts from when it saw the renewal. What the leader
// recorded is authoritative; the decision now says what the rules make of the cluster
// as it stands.
type Explainer struct {
	Config  *v1alpha1.Config
	Kube    kubernetes.Interface
	Fencing versioned.Interface
	Now     func() time.Time
	// PauseConfigMap names the pause requests' ConfigMap (the controller's
	// --pause-configmap).
	PauseConfigMap string
	// IdentityRenewInterval is how often the replicas renew their identity Leases (the
	// controller's --identity-renew-interval); zero: DefaultIdentityRenewInterval.
	IdentityRenewInterval time.Duration
}

// cluster is what Explain reads once.
type cluster struct {
	nodes       []corev1.Node
	leases      map[string]*coordinationv1.Lease
	pods        map[string][]*corev1.Pod
	pdbs        []*policyv1.PodDisruptionBudget
	attachments map[string]int
	incidents   []v1alpha1.NodeFence
	pausedBy    string
}

// Explain writes the explanation for node to w.
func (e Explainer) Explain(ctx context.Context, node string, w io.Writer) error {
	n, err := e.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("explain node %s: %w", node, err)
	}
	pol, err := policy.Select(e.Config.Policies, n.Labels)
	if err != nil {
		return fmt.Errorf("explain node %s: %w", node, err)
	}
	cl, err := e.read(ctx)
	if err != nil {
		return err
	}
	now := e.Now()
	p := printer{w: w}
	if pol == nil {
		p.line("node %s: no policy selects it; kubefence never fences it", node)
		return p.err
	}
	p.line("node %s, policy %s", node, pol.Name)
	det := detector.ForConfig(e.Config)
	for _, l := range cl.leases {
		if l.Spec.RenewTime != nil {
			det.ObserveLease(l, l.Spec.RenewTime.Time)
		}
	}
	pn, obs := e.view(det, pol, n, cl, now)
	dt := e.Config.Detection
	p.line("evidence:  %s (%s)", obs.Evidence, obs.Health)
	p.line("threshold: Lease silent %s or Ready not True %s (detection %s / %s, shortened by the node's workloads; never below the evidence floor %s)",
		policy.Threshold(pol, pn, dt.LeaseStaleAfter.Duration), policy.Threshold(pol, pn, dt.NotReadyAfter.Duration),
		dt.LeaseStaleAfter.Duration, dt.NotReadyAfter.Duration, det.Floor(node))
	if cl.pausedBy != "" {
		p.line("paused:    %s", cl.pausedBy)
	}
	nf := current(cl.incidents, node)
	if nf != nil {
		p.incident(nf)
		if confirm := e.confirmOff(ctx, nf, obs, now); confirm != "" {
			p.line("confirm:   %s", confirm)
		}
	}
	d := e.decide(det, pol, pn, cl, now)
	p.line("rule now:  %s %s: %s", d.Verdict, d.Reason, d.Message)
	p.line("next:      %s", Next(nf, obs, d))
	return p.err
}

// read lists what a decision surveys, once.
func (e Explainer) read(ctx context.Context) (cluster, error) {
	cl := cluster{leases: map[string]*coordinationv1.Lease{}, pods: map[string][]*corev1.Pod{}, attachments: map[string]int{}}
	nodes, err := e.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return cl, fmt.Errorf("list nodes: %w", err)
	}
	cl.nodes = nodes.Items
	leases, err := e.Kube.CoordinationV1().Leases(detector.LeaseNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return cl, fmt.Errorf("list node leases: %w", err)
	}
	for i := range leases.Items {
		cl.leases[leases.Items[i].Name] = &leases.Items[i]
	}
	pods, err := e.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return cl, fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		cl.pods[p.Spec.NodeName] = append(cl.pods[p.Spec.NodeName], p)
	}
	pdbs, err := e.Kube.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return cl, fmt.Errorf("list pod disruption budgets: %w", err)
	}
	for i := range pdbs.Items {
		if pdbs.Items[i].Status.DisruptionsAllowed <= 0 {
			cl.pdbs = append(cl.pdbs, &pdbs.Items[i])
		}
	}
	vas, err := e.Kube.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return cl, fmt.Errorf("list volume attachments: %w", err)
	}
	for _, va := range vas.Items {
		cl.attachments[va.Spec.NodeName]++
	}
	nfs, err := e.Fencing.FencingV1alpha1().NodeFences().List(ctx, metav1.ListOptions{})
	if err != nil {
		return cl, fmt.Errorf("list nodefences: %w", err)
	}
	cl.incidents = nfs.Items
	requests := map[string]string{}
	cm, err := e.Kube.CoreV1().ConfigMaps(e.Config.LeaderElection.Namespace).Get(ctx, e.PauseConfigMap, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return cl, fmt.Errorf("read pause requests: %w", err)
	default:
		for k, v := range cm.Data {
			requests[cm.Name+"/"+k] = v
		}
	}
	cl.pausedBy = whyPaused(e.Config.Paused, requests)
	return cl, nil
}

// view is the node as the incident loop's view sees it (pkg/controller view and
// health): the policy's node with its workloads, judged by the detector with the
// node's own thresholds, and the facts of its incidents.
func (e Explainer) view(det *detector.Detector, pol *v1alpha1.Policy, n *corev1.Node, cl cluster, now time.Time) (policy.Node, detector.Observation) {
	pods := cl.pods[n.Name]
	pn := policy.ForNode(pol, n, pods, cl.pdbs)
	dt := e.Config.Detection
	obs := det.AssessWith(n, now, policy.Threshold(pol, pn, dt.LeaseStaleAfter.Duration), policy.Threshold(pol, pn, dt.NotReadyAfter.Duration))
	pn.Unhealthy = obs.Health == detector.Unhealthy
	pn.Suspect = obs.Health == detector.Suspect || obs.Health == detector.Flapping
	pn.UnhealthyAt = obs.UnhealthyAt
	pn.NothingToRelease = policy.NothingToRelease(pods, cl.attachments[n.Name])
	pn.TargetReadsOff = n.Annotations[v1alpha1.TargetReadsOffAnnotation]
	for i := range cl.incidents {
		nf := &cl.incidents[i]
		if nf.Spec.NodeName != n.Name {
			continue
		}
		f := incidents.FactsOf(nf)
		pn.Fencing = pn.Fencing || f.Phase == v1alpha1.PhaseFencing
		pn.Incident = pn.Incident || f.Phase.Open()
		if f.Verified && f.FenceStart.After(pn.LastFencedAt) {
			pn.LastFencedAt = f.FenceStart
		}
	}
	return pn, obs
}

// decide is policy's verdict on the node now, as the loop asks it for an incident
// (decision): the node taken as unhealthy, the other nodes of the policy surveyed.
func (e Explainer) decide(det *detector.Detector, pol *v1alpha1.Policy, pn policy.Node, cl cluster, now time.Time) policy.Decision {
	sel, err := policy.Selector(pol)
	if err != nil {
		return policy.Decision{Verdict: policy.Hold, Reason: "BadSelector", Message: err.Error()}
	}
	c := policy.Cluster{Paused: cl.pausedBy != "", PausedBy: cl.pausedBy, DryRun: e.Config.DryRun}
	for i := range cl.nodes {
		n := &cl.nodes[i]
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		other, _ := e.view(det, pol, n, cl, now)
		c.Nodes = append(c.Nodes, other)
	}
	for i := range cl.incidents {
		if f := incidents.FactsOf(&cl.incidents[i]); !f.FenceStart.IsZero() && now.Sub(f.FenceStart) <= policy.RateWindow(pol.Budget) {
			c.FenceStarts = append(c.FenceStarts, f.FenceStart)
		}
	}
	pn.Unhealthy = true
	return policy.Decide(pol, pn, c, now)
}

// current is the node's incident the leader drives (its oldest open one, as
// incidents.Store.Open), or else its newest; nil when it has none.
func current(all []v1alpha1.NodeFence, node string) *v1alpha1.NodeFence {
	var open, newest *v1alpha1.NodeFence
	for i := range all {
		nf := &all[i]
		if nf.Spec.NodeName != node {
			continue
		}
		if nf.Status.Phase.Open() && (open == nil || nf.CreationTimestamp.Before(&open.CreationTimestamp)) {
			open = nf
		}
		if newest == nil || newest.CreationTimestamp.Before(&nf.CreationTimestamp) {
			newest = nf
		}
	}
	if open != nil {
		return open
	}
	return newest
}
