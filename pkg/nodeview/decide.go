package nodeview

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/maintenance"
	"github.com/kubefence/kubefence/pkg/policy"
)

// Admit is policy's verdict on the incident named incident, of node pn, with cl's
// fencing facts (who is fencing, when fences started) replaced by those read at the
// decision. The loop's admission adds the fences it decided on and its cache does not
// show yet, under a lock; explain takes the record's (Sources.Recorded).
type Admit func(pol *v1alpha1.Policy, pn policy.Node, cl policy.Cluster, incident string, now time.Time) policy.Decision

// Decision is policy's answer for nf, a pending or held incident of node (or the
// controller's incident about to open), whose view is pn (taken now when pn is empty). A
// person's request fences a node the detector does not (yet) find unhealthy; the budget
// still applies to it, but not the maintenance hold (maintenance.Holds). A node no policy
// selects now (relabelled since its incident opened) is viewed under the incident's
// recorded policy, and whatever policy governs it, a live controller replica on it holds
// its fence.
func (s Sources) Decision(pol *v1alpha1.Policy, pn policy.Node, node *corev1.Node, nf *v1alpha1.NodeFence, now time.Time, admit Admit) (policy.Decision, error) {
	cl, err := s.Cluster(pol, now)
	if err != nil {
		return policy.Decision{}, err
	}
	if pn.Name == "" {
		pn, _ = s.View(pol, node, now)
	}
	pn.Holds.ControllerHere, pn.Holds.ControllerHereUntil = s.replicaOn(node.Name, now)
	pn.Health.Unhealthy = true
	if !maintenance.Holds(nf) {
		pn.Holds.Maintenance = ""
	}
	return admit(pol, pn, cl, nf.Name, now), nil
}

// Cluster is the policy's view of the nodes it governs: each node's health and open
// incidents, as a decision about one of them surveys the others. A node the detector
// finds fresh is healthy whatever its thresholds (detector.Fresh), so only the others
// are assessed with their pods: at 5,000 nodes most of a decision's cost is this pass.
// Who is fencing is the Admit's to read.
func (s Sources) Cluster(pol *v1alpha1.Policy, now time.Time) (policy.Cluster, error) {
	nodes, err := s.Nodes()
	if err != nil {
		return policy.Cluster{}, fmt.Errorf("list nodes: %w", err)
	}
	sel, err := policy.Selector(pol)
	if err != nil {
		return policy.Cluster{}, err
	}
	pausedBy := s.PausedBy()
	cl := policy.Cluster{Paused: s.Config.Paused || pausedBy != "", PausedBy: pausedBy, DryRun: s.Config.DryRun, Nodes: make([]policy.Node, 0, len(nodes))}
	pdbs, open := s.UrgentPDBs(), openNodes(s.Incidents())
	for _, n := range nodes {
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		var pn policy.Node
		if s.Detector.Fresh(n, now) {
			pn = policy.NewNode(pol, n.Name, n.Labels)
		} else {
			pn, _ = s.Health(pol, n, s.Pods(n.Name), pdbs, now, true)
		}
		pn.Incident = open[n.Name]
		cl.Nodes = append(cl.Nodes, pn)
	}
	return cl, nil
}

// Recorded admits on the incident record alone: explain's Admit, which knows of no
// decision still on its way to the record.
func (s Sources) Recorded(pol *v1alpha1.Policy, pn policy.Node, cl policy.Cluster, _ string, now time.Time) policy.Decision {
	fencing, starts := FencingFacts(s.Incidents(), policy.RateWindow(pol.Budget), now)
	return Decide(pol, pn, cl, fencing, starts, now)
}

// Decide is policy.Decide with cl's fencing facts replaced by fencing (the nodes fencing
// now) and starts (the fence starts within the rate window).
func Decide(pol *v1alpha1.Policy, pn policy.Node, cl policy.Cluster, fencing map[string]bool, starts []time.Time, now time.Time) policy.Decision {
	for i := range cl.Nodes {
		cl.Nodes[i].Fencing = fencing[cl.Nodes[i].Name]
	}
	cl.FenceStarts = starts
	return policy.Decide(pol, pn, cl, now)
}

// FencingFacts are the nodes whose incidents are fencing and the fence starts within
// window before now, of the incidents nfs.
func FencingFacts(nfs []*v1alpha1.NodeFence, window time.Duration, now time.Time) (map[string]bool, []time.Time) {
	fencing := map[string]bool{}
	var starts []time.Time
	for _, nf := range nfs {
		f := incidents.FactsOf(nf)
		if f.Phase == v1alpha1.PhaseFencing {
			fencing[nf.Spec.NodeName] = true
		}
		if !f.FenceStart.IsZero() && now.Sub(f.FenceStart) <= window {
			starts = append(starts, f.FenceStart)
		}
	}
	return fencing, starts
}

// openNodes are the nodes with an open incident among nfs.
func openNodes(nfs []*v1alpha1.NodeFence) map[string]bool {
	open := map[string]bool{}
	for _, nf := range nfs {
		if nf.Status.Phase.Open() {
			open[nf.Spec.NodeName] = true
		}
	}
	return open
}
