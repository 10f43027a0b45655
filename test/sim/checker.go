package sim

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/kubefence/kubefence/test/sim/bmc"
)

func dynamicClient(c *Cluster) (dynamic.Interface, error) { return dynamic.NewForConfig(c.Config) }

// releaseKinds are the observations that release a node's workloads.
var releaseKinds = map[string]bool{
	SeenPodDeleted: true, SeenPodDisruptionTarget: true, SeenVADeleted: true, SeenTaintAdded: true,
}

// FirstPowerOff returns when the BMC itself logged the first power-off request that took
// effect, as the checker's evidence that the node stopped; not the controller's word.
func FirstPowerOff(events []bmc.PowerEvent) (time.Time, bool) {
	for _, e := range events {
		if e.Action == bmc.ActionOff && e.Source != "sim" {
			return e.Time, true
		}
	}
	return time.Time{}, false
}

// CheckReleasedAfterFence returns a violation for every release of node's workloads
// observed before its BMC logged power off (safety invariant 1). Observations are timed
// when the watch event arrived, after the change itself, so an observation earlier than
// the power-off is a release that certainly came first.
func CheckReleasedAfterFence(seen []Seen, node string, power []bmc.PowerEvent) []string {
	off, ok := FirstPowerOff(power)
	var v []string
	for _, s := range seen {
		if s.Node != node || !releaseKinds[s.Kind] {
			continue
		}
		switch {
		case !ok:
			v = append(v, fmt.Sprintf("%s %s of node %s at %s, but its BMC never logged power off",
				s.Kind, s.Object, node, s.At.Format(time.RFC3339Nano)))
		case s.At.Before(off):
			v = append(v, fmt.Sprintf("%s %s of node %s at %s, %s before its BMC logged power off",
				s.Kind, s.Object, node, s.At.Format(time.RFC3339Nano), off.Sub(s.At)))
		}
	}
	return v
}

// CheckUntouched returns a violation for anything kubefence did to a node that must be
// left alone: a release of its workloads, an incident, or a power action on its BMC.
func CheckUntouched(seen []Seen, node string, power []bmc.PowerEvent) []string {
	var v []string
	for _, s := range seen {
		if s.Node != node {
			continue
		}
		if releaseKinds[s.Kind] || s.Kind == SeenIncidentPhase {
			v = append(v, fmt.Sprintf("healthy node %s: %s %s %s", node, s.Kind, s.Object, s.Detail))
		}
	}
	for _, e := range power {
		if e.Source != "sim" {
			v = append(v, fmt.Sprintf("healthy node %s: BMC logged %s at %s", node, e.Action, e.Time.Format(time.RFC3339Nano)))
		}
	}
	return v
}

// CheckRenewingNotFenced returns a violation for every power action asked of node's BMC
// (by anyone but the simulation itself) less than within after the kubelet's last Lease
// renewal the API server accepted: a node renewing on time is alive and is never fenced
// (safety invariant 10). The simulation knows the truth the controller can only infer:
// a machine it halted after that renewal was dead, and its fence is held to haltedWithin
// instead, the shortest silence any detection rule may act on (the heartbeat floor).
func CheckRenewingNotFenced(node string, renewals []time.Time, power []bmc.PowerEvent, halts []time.Time, within, haltedWithin time.Duration) []string {
	var v []string
	for _, e := range power {
		if e.Source == "sim" || e.Action == bmc.ActionOn {
			continue
		}
		i, _ := slices.BinarySearchFunc(renewals, e.Time, time.Time.Compare)
		if i == 0 {
			continue
		}
		last, limit := renewals[i-1], within
		if slices.ContainsFunc(halts, func(h time.Time) bool { return h.After(last) && h.Before(e.Time) }) {
			limit = haltedWithin
		}
		if e.Time.Sub(last) < limit {
			v = append(v, fmt.Sprintf("node %s renewed its Lease at %s, %s before its BMC logged %s: a live node was fenced",
				node, last.Format(time.RFC3339Nano), e.Time.Sub(last).Round(time.Millisecond), e.Action))
		}
	}
	return v
}

// CheckOneOffAtATime returns a violation for every power-off asked of a node's BMC while
// an earlier one it took was still pending (a slow BMC logs off-requested when it takes
// the command and off when it acts): no second off goes out while the first may still
// land (safety invariant 7). The second would land after the first was verified and the
// node released, and could power off the node on its next boot.
func CheckOneOffAtATime(node string, power []bmc.PowerEvent) []string {
	var v []string
	var pending []time.Time
	for _, e := range power {
		if e.Source == "sim" {
			continue
		}
		switch e.Action {
		case bmc.ActionOffRequested:
			if len(pending) > 0 {
				v = append(v, fmt.Sprintf("node %s: a power-off asked at %s while the one its BMC took at %s was still pending",
					node, e.Time.Format(time.RFC3339Nano), pending[0].Format(time.RFC3339Nano)))
			}
			pending = append(pending, e.Time)
		case bmc.ActionOff:
			if len(pending) > 0 {
				pending = pending[1:]
			}
		}
	}
	return v
}
