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

// Well-known node labels policy reads.
const (
	ZoneLabel         = "topology.kubernetes.io/zone"
	ControlPlaneLabel = "node-role.kubernetes.io/control-plane"
)

// Verdict is the kind of a decision.
type Verdict string

const (
	// Fence: fence the node now.
	Fence Verdict = "Fence"
	// WouldFence: the policy runs dry; the node would be fenced now. Report it (events,
	// metrics) and touch nothing.
	WouldFence Verdict = "WouldFence"
	// Wait: not yet; ask again at Until (or soon, when Until is zero).
	Wait Verdict = "Wait"
	// Hold: fencing is forbidden; the reason must be reported.
	Hold Verdict = "Hold"
	// None: the node is healthy; there is nothing to decide.
	None Verdict = "None"
)

// Reasons, stable for metrics labels and event reasons.
const (
	ReasonHealthy          = "Healthy"
	ReasonNotYet           = "BelowThreshold"
	ReasonWithinBudget     = "WithinBudget"
	ReasonDryRun           = "DryRun"
	ReasonPaused           = "Paused"
	ReasonExcluded         = "Excluded"
	ReasonNothingToRelease = "NothingToRelease"
	ReasonStorm            = "UnhealthyBudgetExceeded"
	ReasonStormPending     = "UnhealthyBudgetPending"
	ReasonZoneDark         = "ZonePartitioned"
	ReasonCooldown         = "Cooldown"
	ReasonControlPlane     = "ControlPlaneOneAtATime"
	ReasonMaxConcurrent    = "MaxConcurrentReached"
	ReasonRateLimited      = "RateLimited"
	ReasonControllerHere   = "ControllerReplicaAlive"
	ReasonTargetReadsOff   = "TargetReadsOff"
	ReasonMaintenance      = "Maintenance"
)

// Decision is what to do about one node, and why.
type Decision struct {
	Verdict Verdict
	// Until is when to ask again (Wait), or when a hold lifts by itself (Hold after a
	// cooldown); zero when only a change in the cluster can change the answer.
	Until time.Time
	// Reason is one of the Reason constants.
	Reason string
	// Message explains the decision to a person, with the numbers behind it.
	Message string
}

// Node is what policy needs to know of one node. NewNode fills what the labels say; the
// controller adds health (from the detector), incidents, holds and workload facts.
type Node struct {
	Name   string
	Labels map[string]string
	// Zone is the node's topology.kubernetes.io/zone label; empty means no zone rule.
	Zone string
	// ControlPlane is true for nodes labelled node-role.kubernetes.io/control-plane.
	ControlPlane bool
	// Excluded is true for a node that must never be fenced (the policy's exclude label).
	Excluded bool

	// Health is what the detector (and an open incident's record) says of the node.
	Health Health

	// Fencing is true while an incident for this node is fencing.
	Fencing bool
	// Incident is true while an incident for this node is open (pending, held, fencing,
	// fenced or remediated, until the node is back). The budget counts such a node as
	// unhealthy whatever the detector says of it now: a fenced node is down until it
	// recovers, and a new leader's fresh clocks must not make it look healthy.
	Incident bool
	// LastFencedAt is when the node's most recent fence started; zero if never.
	LastFencedAt time.Time

	// Holds are what the controller found that holds the node whatever its health.
	Holds Holds
	// Workload is what the node's pods ask of a fence.
	Workload Workload
}

// Health is a node's health as policy reads it.
type Health struct {
	// Unhealthy is true once the detector's threshold has passed.
	Unhealthy bool
	// Suspect is true for a node that is not unhealthy but not healthy either: evidence
	// bad for less than the threshold, or flapping. It keeps a zone from counting as lit.
	Suspect bool
	// UnhealthyAt is when a node with bad evidence will turn unhealthy.
	UnhealthyAt time.Time
	// SilentSince is when the node's evidence turned bad (the earliest of the detector's
	// and an open incident's record); zero when not known.
	SilentSince time.Time
}

// Holds are the signs that hold a node whatever its health; each, when not empty, says
// what it is in words.
type Holds struct {
	// ControllerHere, when not empty, is the evidence that a live replica of the
	// controller runs on this node (this replica, or one whose identity Lease this replica
	// saw renewed lately). Such a node is alive and is never fenced.
	ControllerHere string
	// ControllerHereUntil is when that evidence lapses unless the replica renews again;
	// zero when it does not lapse by itself (this replica's own node).
	ControllerHereUntil time.Time
	// TargetReadsOff, when not empty, says that the node's fence device read off while
	// the node lived (the controller's mark, v1alpha1.TargetReadsOffAnnotation): a fence
	// through it would verify without touching the node.
	TargetReadsOff string
	// Maintenance, when not empty, names what says the node was taken out on purpose
	// (pkg/maintenance): it is held, not fenced, until the policy's maintenance window
	// from Health.SilentSince has passed.
	Maintenance string
}

// Workload are the facts of a node's pods that change when and whether it is fenced.
type Workload struct {
	// MinUnreachableToleration is the smallest explicit tolerationSeconds for
	// node.kubernetes.io/unreachable among the node's pods (see UnreachableToleration);
	// nil when no pod sets one.
	MinUnreachableToleration *time.Duration
	// Urgent is true when a PodDisruptionBudget guarding a pod of the node allows no
	// more disruptions (see Urgent).
	Urgent bool
	// NothingToRelease is true once the controller has found no StatefulSet pod and no
	// ReadWriteOnce volume attachment on the node. Leave it false when unknown.
	NothingToRelease bool
}

// NewNode describes a node from its labels as policy p sees it.
func NewNode(p *v1alpha1.Policy, name string, nodeLabels map[string]string) Node {
	_, cp := nodeLabels[ControlPlaneLabel]
	n := Node{Name: name, Labels: nodeLabels, Zone: nodeLabels[ZoneLabel], ControlPlane: cp}
	if p != nil && p.ExcludeLabel != "" {
		_, n.Excluded = nodeLabels[p.ExcludeLabel]
	}
	return n
}

// Cluster is the set of nodes a policy governs, as seen at one time.
type Cluster struct {
	Nodes []Node
	// Paused and DryRun are the cluster-wide switches (Config.Paused, Config.DryRun or a
	// runtime override); each policy has its own as well.
	Paused bool
	DryRun bool
	// PausedBy says who paused fencing and why (the pause requests), for the hold's
	// message; empty when only Paused says so.
	PausedBy string
	// FenceStarts are the start times of fences across the cluster within
	// RateWindow(budget) before now, for the rate limit. Order does not matter.
	FenceStarts []time.Time
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
	sel, err := Selector(p)
	if err != nil {
		return false, err
	}
	return sel.Matches(labels.Set(nodeLabels)), nil
}

// Selector is the policy's node selector; every node when it has none.
func Selector(p *v1alpha1.Policy) (labels.Selector, error) {
	if p.NodeSelector == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(p.NodeSelector)
	if err != nil {
		return nil, fmt.Errorf("policy %s: nodeSelector: %w", p.Name, err)
	}
	return sel, nil
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

// Decide says whether node may be fenced at now under policy p, given every node p
// governs. The rules are checked in a fixed order and the first that objects decides:
// a live controller replica on the node, pause, exclusion, maintenance, nothing to release, storm,
// dark zone, cooldown, control plane one at a time, maxConcurrent, rate limit; then
// Fence, or WouldFence when running dry.
func Decide(p *v1alpha1.Policy, node Node, cluster Cluster, now time.Time) Decision {
	if !node.Health.Unhealthy {
		if !node.Health.UnhealthyAt.IsZero() {
			return Decision{Verdict: Wait, Until: node.Health.UnhealthyAt, Reason: ReasonNotYet,
				Message: fmt.Sprintf("unhealthy at %s if nothing changes", stamp(node.Health.UnhealthyAt))}
		}
		return Decision{Verdict: None, Reason: ReasonHealthy, Message: "node is healthy"}
	}
	v := survey(node, cluster)
	for _, rule := range rules {
		if d, objects := rule(p, node, cluster, v, now); objects {
			return d
		}
	}
	msg := fmt.Sprintf("%d of %d nodes governed by policy %s unhealthy, %d fencing: within budget",
		v.unhealthy, v.total, p.Name, v.fencing)
	if p.DryRun || cluster.DryRun {
		return Decision{Verdict: WouldFence, Reason: ReasonDryRun, Message: "dry run, would fence: " + msg}
	}
	return Decision{Verdict: Fence, Reason: ReasonWithinBudget, Message: msg}
}

// view is one pass over the cluster, shared by the rules.
type view struct {
	total, unhealthy int
	// suspect counts the nodes that are neither unhealthy nor in an incident but have bad
	// evidence; suspectUntil is the soonest any of them turns unhealthy if nothing changes.
	suspect      int
	suspectUntil time.Time
	// fencing and cpFencing count nodes other than the one decided.
	fencing, cpFencing int
	// zoneNodes and zoneLit count nodes and healthy nodes in the decided node's zone.
	zoneNodes, zoneLit int
}

func survey(node Node, cluster Cluster) view {
	v := view{total: len(cluster.Nodes)}
	for i := range cluster.Nodes {
		n := &cluster.Nodes[i]
		switch {
		case n.Health.Unhealthy || n.Incident:
			v.unhealthy++
		case n.Health.Suspect:
			v.suspect++
			if !n.Health.UnhealthyAt.IsZero() && (v.suspectUntil.IsZero() || n.Health.UnhealthyAt.Before(v.suspectUntil)) {
				v.suspectUntil = n.Health.UnhealthyAt
			}
		}
		if n.Fencing && n.Name != node.Name {
			v.fencing++
			if n.ControlPlane {
				v.cpFencing++
			}
		}
		if node.Zone != "" && n.Zone == node.Zone {
			v.zoneNodes++
			if !n.Health.Unhealthy && !n.Health.Suspect && !n.Fencing && !n.Incident {
				v.zoneLit++
			}
		}
	}
	return v
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
