package loopmetrics

import (
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencer"
)

// Labels of kubefence_node_fenced_timestamp_seconds, which KubefenceNodeLeftOff keeps.
const (
	LabelNode   = "node"
	LabelAction = "action"
)

// FencedNode is a node whose open incident has its fence verified: with the default
// action, Off, the node stays off until a person brings it back (docs/runbooks.md,
// KubefenceNodeLeftOff); with Reboot, until its power on brings it back.
type FencedNode struct {
	Node   string
	Action v1alpha1.FenceAction
	// Since is when the fence was verified (fencer.FenceVerifiedAt).
	Since time.Time
}

// FencedNodes returns the nodes of the open incidents among nfs whose fence is verified,
// each incident's action read with its policy among policies.
func FencedNodes(nfs []*v1alpha1.NodeFence, policies []v1alpha1.Policy) []FencedNode {
	var out []FencedNode
	for _, nf := range nfs {
		since := fencer.FenceVerifiedAt(&nf.Status)
		if !nf.Status.Phase.Open() || since.IsZero() {
			continue
		}
		var pol *v1alpha1.Policy
		for i := range policies {
			if policies[i].Name == nf.Status.Policy {
				pol = &policies[i]
			}
		}
		out = append(out, FencedNode{Node: nf.Spec.NodeName, Action: fencer.ActionOf(nf, pol), Since: since})
	}
	return out
}

// SetFenced makes kubefence_node_fenced_timestamp_seconds show exactly nodes: a series
// per node and action, and none for a node whose incident ended. The series of nodes
// still fenced are set in place, never removed and added again, so that no scrape finds
// them missing.
func (m *Metrics) SetFenced(nodes []FencedNode) {
	m.fencedMu.Lock()
	defer m.fencedMu.Unlock()
	shown := map[[2]string]bool{}
	for _, n := range nodes {
		key := [2]string{n.Node, string(n.Action)}
		shown[key] = true
		m.Fenced.WithLabelValues(key[0], key[1]).Set(float64(n.Since.UnixNano()) / 1e9)
	}
	for key := range m.fencedShown {
		if !shown[key] {
			m.Fenced.DeleteLabelValues(key[0], key[1])
		}
	}
	m.fencedShown = shown
}
