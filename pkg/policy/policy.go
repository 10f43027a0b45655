package policy

import (
	"fmt"
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// Verdict is the kind of a decision.
type Verdict string

const (
	// Fence: fence the node now.
	Fence Verdict = "Fence"
	// Wait: not yet; ask again at Until.
	Wait Verdict = "Wait"
	// Hold: fencing is forbidden by the budget; the reason must be reported.
	Hold Verdict = "Hold"
	// None: the node is healthy; there is nothing to decide.
	None Verdict = "None"
)

// Hold and wait reasons, stable for metrics and events.
const (
	ReasonStorm         = "UnhealthyBudgetExceeded"
	ReasonMaxConcurrent = "MaxConcurrentReached"
	ReasonNotYet        = "BelowThreshold"
)

// Decision is what to do about one node, and why.
type Decision struct {
	Verdict Verdict
	Until   time.Time
	Reason  string
	Message string
}

// Node is what policy needs to know of one node.
type Node struct {
	Name   string
	Labels map[string]string
	// Unhealthy is true once the detector's threshold has passed.
	Unhealthy bool
	// UnhealthyAt is when a node with bad evidence will turn unhealthy.
	UnhealthyAt time.Time
	// Fencing is true while an incident for this node is fencing.
	Fencing bool
}

// Cluster is the set of nodes a policy governs, as seen at one time.
type Cluster struct {
	Nodes []Node
}

// Select returns the first policy whose selector matches the node's labels.
func Select(policies []v1alpha1.Policy, nodeLabels map[string]string) (*v1alpha1.Policy, error) {
	for i := range policies {
		ok, err := Matches(&policies[i], nodeLabels)
		if err != nil {
			return nil, err
		}
		if ok {
			return &policies[i], nil
		}
	}
	return nil, nil
}

// Matches reports whether the policy selects a node with these labels.
func Matches(p *v1alpha1.Policy, nodeLabels map[string]string) (bool, error) {
	if p.NodeSelector == nil {
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(p.NodeSelector)
	if err != nil {
		return false, fmt.Errorf("policy %s: nodeSelector: %w", p.Name, err)
	}
	return sel.Matches(labels.Set(nodeLabels)), nil
}

// MaxUnhealthy is how many of total nodes may be unhealthy before everything is held: the
// configured count, or the percentage rounded down, but at least 1 so that a lone dead
// node in a small cluster can be fenced.
func MaxUnhealthy(b v1alpha1.Budget, total int) int {
	if b.MaxUnhealthy == nil {
		return math.MaxInt
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(b.MaxUnhealthy, total, false)
	if err != nil {
		// Validated configurations never get here; refusing to fence is the safe answer.
		return 0
	}
	return max(n, 1)
}

// Decide says whether node may be fenced at now under policy p, given every node p governs.
func Decide(p *v1alpha1.Policy, node Node, cluster Cluster, now time.Time) Decision {
	if !node.Unhealthy {
		if !node.UnhealthyAt.IsZero() {
			return Decision{Verdict: Wait, Until: node.UnhealthyAt, Reason: ReasonNotYet,
				Message: fmt.Sprintf("unhealthy at %s if nothing changes", node.UnhealthyAt.UTC().Format(time.RFC3339))}
		}
		return Decision{Verdict: None}
	}
	unhealthy, fencing := 0, 0
	for _, n := range cluster.Nodes {
		if n.Unhealthy {
			unhealthy++
		}
		if n.Fencing && n.Name != node.Name {
			fencing++
		}
	}
	if limit := MaxUnhealthy(p.Budget, len(cluster.Nodes)); unhealthy > limit {
		return Decision{Verdict: Hold, Reason: ReasonStorm, Message: fmt.Sprintf(
			"%d of %d nodes governed by policy %s are unhealthy, maxUnhealthy %s allows %d: holding all fencing",
			unhealthy, len(cluster.Nodes), p.Name, p.Budget.MaxUnhealthy.String(), limit)}
	}
	if fencing >= int(p.Budget.MaxConcurrent) {
		return Decision{Verdict: Wait, Reason: ReasonMaxConcurrent, Message: fmt.Sprintf(
			"%d fencing operations in flight, maxConcurrent is %d", fencing, p.Budget.MaxConcurrent)}
	}
	return Decision{Verdict: Fence, Message: fmt.Sprintf("%d of %d governed nodes unhealthy, within budget", unhealthy, len(cluster.Nodes))}
}
