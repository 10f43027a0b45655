package policy

import (
	"fmt"
	"slices"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// rule returns a decision and true when it objects to fencing node now.
type rule func(p *v1alpha1.Policy, node Node, cluster Cluster, v view, now time.Time) (Decision, bool)

// rules in the order Decide checks them. Switches a person set come first, then what
// holds everything (storm, dark zone), then what only delays this node.
var rules = []rule{controllerHere, paused, excluded, maintenance, targetReadsOff, nothingToRelease, storm, zoneDark, cooldown, controlPlane, maxConcurrent, rateLimited}

func hold(reason, format string, args ...any) (Decision, bool) {
	return Decision{Verdict: Hold, Reason: reason, Message: fmt.Sprintf(format, args...)}, true
}

func wait(until time.Time, reason, format string, args ...any) (Decision, bool) {
	return Decision{Verdict: Wait, Until: until, Reason: reason, Message: fmt.Sprintf(format, args...)}, true
}

// controllerHere holds a node that a live controller replica runs on: that replica is
// proof of life, and a replica must never fence the machine it runs on. No force
// annotation overrides it.
func controllerHere(_ *v1alpha1.Policy, node Node, _ Cluster, _ view, _ time.Time) (Decision, bool) {
	if node.Holds.ControllerHere != "" {
		d, _ := hold(ReasonControllerHere, "node %s runs a live kubefence controller replica (%s): it is alive, not fenced",
			node.Name, node.Holds.ControllerHere)
		// The hold lifts by itself when the replica's renewals stop: looked at again then.
		d.Until = node.Holds.ControllerHereUntil
		return d, true
	}
	return Decision{}, false
}

// targetReadsOff holds a node whose fence device read off while the node lived: the
// mapping names another machine, and a fence would verify without touching the node.
func targetReadsOff(_ *v1alpha1.Policy, node Node, _ Cluster, _ view, _ time.Time) (Decision, bool) {
	if node.Holds.TargetReadsOff != "" {
		return hold(ReasonTargetReadsOff, "%s", node.Holds.TargetReadsOff)
	}
	return Decision{}, false
}

func paused(p *v1alpha1.Policy, _ Node, cluster Cluster, _ view, _ time.Time) (Decision, bool) {
	switch {
	case cluster.Paused && cluster.PausedBy != "":
		return hold(ReasonPaused, "fencing is paused cluster-wide: %s", cluster.PausedBy)
	case cluster.Paused:
		return hold(ReasonPaused, "fencing is paused cluster-wide")
	case p.Paused:
		return hold(ReasonPaused, "policy %s is paused", p.Name)
	}
	return Decision{}, false
}

func excluded(p *v1alpha1.Policy, node Node, _ Cluster, _ view, _ time.Time) (Decision, bool) {
	if node.Excluded {
		return hold(ReasonExcluded, "node %s is excluded from fencing (label %s)", node.Name, p.ExcludeLabel)
	}
	return Decision{}, false
}

// maintenance holds a node that people or the platform took out on purpose, for at most
// the policy's maintenance window from when it fell silent: a patch reboot with a slow
// POST is not a failure, and a node silent past the window is. A node whose silence has
// no known start (a person's request on a node that looks alive) is held until the
// signal goes or a person forces the fence.
func maintenance(p *v1alpha1.Policy, node Node, _ Cluster, _ view, now time.Time) (Decision, bool) {
	if node.Holds.Maintenance == "" {
		return Decision{}, false
	}
	window := p.Maintenance.MaxWindow.Duration
	if node.Health.SilentSince.IsZero() {
		return hold(ReasonMaintenance, "node %s is under maintenance: %s; held while it lasts", node.Name, node.Holds.Maintenance)
	}
	until := node.Health.SilentSince.Add(window)
	if !now.Before(until) {
		return Decision{}, false
	}
	d, _ := hold(ReasonMaintenance, "node %s is under maintenance: %s; held until %s, the end of policy %s's maintenance window of %s from its last sign of life at %s; fenced then if still silent",
		node.Name, node.Holds.Maintenance, stamp(until), p.Name, window, stamp(node.Health.SilentSince))
	d.Until = until
	return d, true
}

func nothingToRelease(p *v1alpha1.Policy, node Node, _ Cluster, _ view, _ time.Time) (Decision, bool) {
	if p.SkipIfNothingToRelease && node.Workload.NothingToRelease {
		return hold(ReasonNothingToRelease,
			"node %s runs no StatefulSet pod and has no ReadWriteOnce volume attached; policy %s skips such nodes",
			node.Name, p.Name)
	}
	return Decision{}, false
}

// storm holds all fencing while more nodes are unhealthy than the budget allows. Nodes
// that die together cross the threshold apart, by their renewal phases (up to a renewal
// period) and by when this process saw their last renewals; so while the unhealthy and
// the suspect nodes together exceed the budget, the decision waits until the suspects
// are judged, healthy again or unhealthy, instead of fencing the first of a storm.
func storm(p *v1alpha1.Policy, _ Node, _ Cluster, v view, _ time.Time) (Decision, bool) {
	limit := MaxUnhealthy(p.Budget, v.total)
	if v.unhealthy > limit {
		return hold(ReasonStorm, "%d of %d nodes governed by policy %s are unhealthy, maxUnhealthy %s allows %d: holding all fencing",
			v.unhealthy, v.total, p.Name, p.Budget.MaxUnhealthy.String(), limit)
	}
	if v.unhealthy+v.suspect > limit {
		return wait(v.suspectUntil, ReasonStormPending, "%d of %d nodes governed by policy %s are unhealthy and %d more suspect, maxUnhealthy %s allows %d: waiting until the suspects are judged",
			v.unhealthy, v.total, p.Name, v.suspect, p.Budget.MaxUnhealthy.String(), limit)
	}
	return Decision{}, false
}

func zoneDark(p *v1alpha1.Policy, node Node, _ Cluster, v view, _ time.Time) (Decision, bool) {
	if on(p.Budget.PerZone) && node.Zone != "" && v.zoneLit == 0 {
		return hold(ReasonZoneDark, "no node of zone %s is healthy (%d governed nodes in it): a partition, not %d dead nodes",
			node.Zone, v.zoneNodes, v.zoneNodes)
	}
	return Decision{}, false
}

func cooldown(p *v1alpha1.Policy, node Node, _ Cluster, _ view, now time.Time) (Decision, bool) {
	if node.LastFencedAt.IsZero() {
		return Decision{}, false
	}
	if until := node.LastFencedAt.Add(p.Budget.Cooldown.Duration); now.Before(until) {
		return wait(until, ReasonCooldown, "node %s was fenced at %s; cooldown %s lasts until %s",
			node.Name, stamp(node.LastFencedAt), p.Budget.Cooldown.Duration, stamp(until))
	}
	return Decision{}, false
}

func controlPlane(p *v1alpha1.Policy, node Node, _ Cluster, v view, _ time.Time) (Decision, bool) {
	if on(p.Budget.ControlPlaneOneAtATime) && node.ControlPlane && v.cpFencing > 0 {
		return wait(time.Time{}, ReasonControlPlane, "another control-plane node is fencing; control-plane nodes are fenced one at a time")
	}
	return Decision{}, false
}

func maxConcurrent(p *v1alpha1.Policy, _ Node, _ Cluster, v view, _ time.Time) (Decision, bool) {
	if v.fencing >= int(p.Budget.MaxConcurrent) {
		return wait(time.Time{}, ReasonMaxConcurrent, "%d fencing operations in flight, maxConcurrent is %d",
			v.fencing, p.Budget.MaxConcurrent)
	}
	return Decision{}, false
}

func rateLimited(p *v1alpha1.Policy, _ Node, cluster Cluster, _ view, now time.Time) (Decision, bool) {
	rl := p.Budget.RateLimit
	next, ok := NextToken(rl, cluster.FenceStarts, now)
	if ok {
		return Decision{}, false
	}
	return wait(next, ReasonRateLimited, "rate limit of %d fences per minute (burst %d) reached; next at %s",
		rl.FencesPerMinute, rl.Burst, stamp(next))
}

// RateWindow is how far back FenceStarts must reach for the rate limit: a bucket left
// alone that long is full again. Zero when there is no rate limit.
func RateWindow(b v1alpha1.Budget) time.Duration {
	rl := b.RateLimit
	if rl.FencesPerMinute <= 0 {
		return 0
	}
	return time.Duration(max(rl.Burst, 1)) * time.Minute / time.Duration(rl.FencesPerMinute)
}

// NextToken replays a token bucket over the fence starts and says whether a token is
// available at now, or else when the next one will be. The bucket starts full before the
// first start; starts beyond the bucket (a forced fence) are debt that later tokens repay.
// Tokens are kept as time credit (one token is 1/FencesPerMinute minutes) so the
// arithmetic is exact.
func NextToken(rl v1alpha1.RateLimit, starts []time.Time, now time.Time) (time.Time, bool) {
	if rl.FencesPerMinute <= 0 {
		return now, true
	}
	per := time.Minute / time.Duration(rl.FencesPerMinute)
	capacity := time.Duration(max(rl.Burst, 1)) * per
	credit, last := capacity, time.Time{}
	for _, s := range sortedTimes(starts) {
		if s.After(now) {
			break
		}
		if !last.IsZero() {
			credit = min(capacity, credit+s.Sub(last))
		}
		credit, last = credit-per, s
	}
	if !last.IsZero() {
		credit = min(capacity, credit+now.Sub(last))
	}
	if credit >= per {
		return now, true
	}
	return now.Add(per - credit), false
}

func sortedTimes(ts []time.Time) []time.Time {
	out := slices.Clone(ts)
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// on reads an optional switch whose default is on; Default sets it, but a policy that
// skipped Default must not lose a safety rule.
func on(b *bool) bool { return b == nil || *b }
