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
	"k8s.io/client-go/kubernetes"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/nodeview"
	"github.com/kubefence/kubefence/pkg/policy"
)

// Explainer answers "why is node X (not) fenced, and what happens next" from what the
// cluster holds: the leader's record (the node's incident: its evidence, the rule that
// holds it, its timeline) and the decision the leader would take now, computed by the
// very code the leader runs (pkg/nodeview) on the same kinds of input: the node's
// workloads, its health, what says it is under maintenance, a controller replica on it,
// the pause requests, the budget and the incidents. The detector here has watched
// nothing: it takes each Lease as seen at its renewTime, on the kubelet's clock, where
// the leader counts from when it saw the renewal, and it has measured no renewal cadence,
// so heartbeat evidence (HeartbeatLost) never speaks here. What the leader recorded is
// authoritative; the decision now says what the rules make of the cluster as it stands.
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
	// Maintenance finds the Machines and NodeMaintenances that name a node, as the
	// loop's does (a maintenance.Reader, filled by maintenance.Read); nil reads only what
	// the Node says.
	Maintenance nodeview.Maintenance
	// Agents, when set, passes the node agents' verdicts to explain's detector, as the
	// loop's watch passes its seat's to the loop's; nil: none (a one-shot command has no
	// seat among the agents' peers).
	Agents func(*detector.Detector) nodeview.Agents
	// Live, when set, are the running loop's own sources (controller.Controller.Sources):
	// its caches, its detector with every renewal and heartbeat it saw, its peers. Explain
	// then answers from them, as the leader, and reads only the node and its Leases.
	Live func() nodeview.Sources
}

// cluster is what Explain reads once.
type cluster struct {
	nodes       []*corev1.Node
	leases      map[string]*coordinationv1.Lease
	pods        map[string][]*corev1.Pod
	pdbs        []*policyv1.PodDisruptionBudget
	attachments map[string]int
	incidents   []*v1alpha1.NodeFence
	pausedBy    string
}

// Explain writes the explanation for node to w.
func (e Explainer) Explain(ctx context.Context, node string, w io.Writer) error {
	src, err := e.inputs(ctx)
	if err != nil {
		return err
	}
	n, err := e.node(ctx, src, node)
	if err != nil {
		return fmt.Errorf("explain node %s: %w", node, err)
	}
	pol, err := policy.Select(e.Config.Policies, n.Labels)
	if err != nil {
		return fmt.Errorf("explain node %s: %w", node, err)
	}
	now := e.Now()
	all, pausedBy := src.Incidents(), src.PausedBy()
	p := printer{w: w}
	if pol == nil {
		p.line("node %s: no policy selects it; kubefence never fences it", node)
		return p.err
	}
	p.line("node %s, policy %s", node, pol.Name)
	pn, obs := src.Observe(ctx, pol, n, now)
	dt := e.Config.Detection
	p.line("evidence:  %s (%s)", obs.Evidence, obs.Health)
	p.line("threshold: Lease silent %s or Ready not True %s (detection %s / %s, shortened by the node's workloads; never below the evidence floor %s)",
		policy.Threshold(pol, pn, dt.LeaseStaleAfter.Duration), policy.Threshold(pol, pn, dt.NotReadyAfter.Duration),
		dt.LeaseStaleAfter.Duration, dt.NotReadyAfter.Duration, src.Detector.Floor(node))
	if e.Config.Heartbeats != nil && src.Agents == nil {
		p.line("heartbeats: not read here (no seat among the node agents' peers, no renewal cadence measured); the leader may find a node whose agent is gone and whose kubelet does not answer unhealthy sooner")
	}
	if pausedBy != "" {
		p.line("paused:    %s", pausedBy)
	}
	nf := current(all, node)
	if nf != nil {
		p.incident(nf)
		if confirm := e.confirmOff(ctx, nf, obs, src.Replicas, now); confirm != "" {
			p.line("confirm:   %s", confirm)
		}
	}
	d, err := src.Decision(pol, pn, n, deciding(all, node), now, src.Recorded)
	if err != nil {
		return fmt.Errorf("explain node %s: %w", node, err)
	}
	p.line("rule now:  %s %s: %s", d.Verdict, d.Reason, d.Message)
	p.line("next:      %s", Next(nf, obs, d))
	return p.err
}

// node is the Node as the loop's cache holds it (Live), so that its detector assesses the
// very object its syncs do, or as the API server has it now.
func (e Explainer) node(ctx context.Context, src nodeview.Sources, name string) (*corev1.Node, error) {
	if e.Live == nil {
		return e.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	nodes, err := src.Nodes()
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
}

// inputs are the sources of the view and the decision: the loop's own (Live), or what
// explain reads now.
func (e Explainer) inputs(ctx context.Context) (nodeview.Sources, error) {
	if e.Live != nil {
		return e.Live(), nil
	}
	cl, err := e.read(ctx)
	if err != nil {
		return nodeview.Sources{}, err
	}
	replicas, err := e.replicas(ctx)
	if err != nil {
		return nodeview.Sources{}, err
	}
	return e.sources(cl, replicas), nil
}

// sources are what explain read, as the inputs of the loop's view and decision: a
// detector that saw each node Lease at its renewTime, the replicas' identity Leases, the
// pause requests and the incidents as the API server holds them.
func (e Explainer) sources(cl cluster, replicas *leader.Replicas) nodeview.Sources {
	det := detector.ForConfig(e.Config)
	for _, l := range cl.leases {
		if l.Spec.RenewTime != nil {
			det.ObserveLease(l, l.Spec.RenewTime.Time)
		}
	}
	s := nodeview.Sources{Config: e.Config, Detector: det,
		Nodes:       func() ([]*corev1.Node, error) { return cl.nodes, nil },
		Pods:        func(node string) []*corev1.Pod { return cl.pods[node] },
		UrgentPDBs:  func() []*policyv1.PodDisruptionBudget { return cl.pdbs },
		Attachments: func(node string) int { return cl.attachments[node] },
		Incidents:   func() []*v1alpha1.NodeFence { return cl.incidents },
		IncidentsOf: func(node string) []incidents.Facts {
			var out []incidents.Facts
			for _, nf := range cl.incidents {
				if nf.Spec.NodeName == node {
					out = append(out, incidents.FactsOf(nf))
				}
			}
			return out
		},
		PausedBy: func() string { return cl.pausedBy },
		Replicas: replicas, Maintenance: e.Maintenance}
	if e.Agents != nil {
		s.Agents = e.Agents(det)
	}
	return s
}

// replicas are the controller replicas whose identity Leases explain reads, each seen
// at its renewTime, on its writer's clock, as the detector sees the kubelets' Leases.
func (e Explainer) replicas(ctx context.Context) (*leader.Replicas, error) {
	every := e.IdentityRenewInterval
	if every <= 0 {
		every = DefaultIdentityRenewInterval
	}
	r := leader.NewReplicas("", every)
	leases, err := e.Kube.CoordinationV1().Leases(e.Config.LeaderElection.Namespace).List(ctx, metav1.ListOptions{LabelSelector: leader.ReplicaSelector})
	if err != nil {
		return nil, fmt.Errorf("list the replicas' identity Leases: %w", err)
	}
	for i := range leases.Items {
		if l := &leases.Items[i]; l.Spec.RenewTime != nil {
			r.Observe(l, l.Spec.RenewTime.Time)
		}
	}
	return r, nil
}

// read lists what a decision surveys, once.
func (e Explainer) read(ctx context.Context) (cluster, error) {
	cl := cluster{leases: map[string]*coordinationv1.Lease{}, pods: map[string][]*corev1.Pod{}, attachments: map[string]int{}}
	nodes, err := e.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return cl, fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodes.Items {
		cl.nodes = append(cl.nodes, &nodes.Items[i])
	}
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
	for i := range nfs.Items {
		cl.incidents = append(cl.incidents, &nfs.Items[i])
	}
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

// deciding is the incident of node the leader decides on (the oldest open one,
// incidents.OldestOpen), or the controller's incident it would open.
func deciding(all []*v1alpha1.NodeFence, node string) *v1alpha1.NodeFence {
	if nf := incidents.OldestOpen(ofNode(all, node)); nf != nil {
		return nf
	}
	return &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: node, RequestedBy: v1alpha1.RequestedByController}}
}

func ofNode(all []*v1alpha1.NodeFence, node string) []*v1alpha1.NodeFence {
	var out []*v1alpha1.NodeFence
	for _, nf := range all {
		if nf.Spec.NodeName == node {
			out = append(out, nf)
		}
	}
	return out
}

// current is the node's incident the leader drives (its oldest open one, as
// incidents.Store.Open), or else its newest; nil when it has none.
func current(all []*v1alpha1.NodeFence, node string) *v1alpha1.NodeFence {
	mine := ofNode(all, node)
	if open := incidents.OldestOpen(mine); open != nil {
		return open
	}
	var newest *v1alpha1.NodeFence
	for _, nf := range mine {
		if newest == nil || newest.CreationTimestamp.Before(&nf.CreationTimestamp) {
			newest = nf
		}
	}
	return newest
}
