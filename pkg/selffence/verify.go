package selffence

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Report is the latest state a node agent reported through the API server, as the
// controller read it (a quorum read, when it verifies).
type Report struct {
	// At is when the API server accepted the report, on its clock.
	At time.Time
	// Armed is true while the agent's watchdog is armed; Timeout is the timeout in force.
	Armed   bool
	Timeout time.Duration
	// BootID is the boot the agent runs in.
	BootID string
	// Members is the agent's member list (AgentView.Members) when it reported.
	Members []string
	// Every is how often the agent writes its report when nothing in it changed: a live
	// agent is never quiet much longer. Zero when the report does not say.
	Every time.Duration
	// Emulated is true for an emulated watchdog (one that resets only a test's simulated
	// machine).
	Emulated bool
}

// Case is what the controller knows of one node's watchdog fence, on its own clock
// unless said otherwise.
type Case struct {
	// Visible is when the controller's create of the NodeFence returned.
	Visible time.Time
	// Report is the node's agent's latest report; nil if none.
	Report *Report
	// ArmedBefore is when the API server accepted the latest report before Visible that
	// said the watchdog was armed; zero if none.
	ArmedBefore time.Time
	// BootID is the node's boot ID as its Node object says now.
	BootID string
	// Members are the cluster's nodes now, and NewestMember the newest creationTimestamp
	// among them (API server clock).
	Members      []string
	NewestMember time.Time
	// Held is, per member, when the controller first read a report of that member's agent
	// that held the NodeFence (listed it among the nodes to fence).
	Held map[string]time.Time
	// LastLife is the latest sign of life of the node the controller has seen: a Lease
	// renewal, its agent's heartbeat or report, Ready turning True. Zero if none.
	LastLife time.Time
	// KubeletLife is the latest sign of life of the node's kubelet alone: a renewal of its
	// Lease or a new Ready heartbeat. Zero if none.
	KubeletLife time.Time
	// AgentLeft is when the controller's seat among the agents' peers last saw the node's
	// agent leave them (a goodbye, as an agent that is stopped says it); zero if never.
	AgentLeft time.Time
}

// Params are the settings the two rules share.
type Params struct {
	// Isolation is the agents' setting (Live).
	Isolation time.Duration
	// ReportMaxAge is how old the armed report before the NodeFence may be.
	ReportMaxAge time.Duration
	// AllowEmulated counts emulated watchdogs: for test clusters only.
	AllowEmulated bool
}

// State is Verify's verdict.
type State string

const (
	// Ineligible: the node cannot be counted fenced through its watchdog at all.
	Ineligible State = "Ineligible"
	// Waiting: not yet; Until says when, if nothing changes.
	Waiting State = "Waiting"
	// Verified: the node has reset.
	Verified State = "Verified"
	// Contradicted: the node showed life after it must have reset.
	Contradicted State = "Contradicted"
)

// Verdict is Verify's answer.
type Verdict struct {
	State  State
	Reason string
	Until  time.Time
}

// Verify says whether the node of c has reset through its watchdog at now. The node's
// agent stops feeding by V + Isolation, where V is when a majority of the node's own
// member list held the NodeFence (see Live); its watchdog resets it within one timeout
// of the last feed; the controller waits a second timeout for clock rates and the feed
// period. So the node counts as fenced at max(V, last sign of life) + Isolation + 2 ×
// timeout. The assumptions (a watchdog that resets the machine, bounded clock rates,
// quorum reads, one member list for the node and the controller) are in
// docs/safety-model.md.
func Verify(c Case, p Params, now time.Time) Verdict {
	if v, ok := eligible(c, p); !ok {
		return v
	}
	members := c.Report.Members
	var held []time.Time
	for _, m := range members {
		if at, ok := c.Held[m]; ok {
			held = append(held, at)
		}
	}
	need := len(members)/2 + 1
	t := c.Report.Timeout
	var majority time.Time
	if len(held) >= need {
		sort.Slice(held, func(i, j int) bool { return held[i].Before(held[j]) })
		majority = held[need-1]
		// A node that lived past its reset contradicts the fence, whatever else is
		// wrong with its watchdog: said first, and loudly.
		if mustReset := majority.Add(p.Isolation + t); c.LastLife.After(mustReset.Add(t)) {
			return Verdict{State: Contradicted, Reason: fmt.Sprintf("sign of life at %s, after the node must have reset (%s, plus one timeout)",
				stamp(c.LastLife), stamp(mustReset))}
		}
	}
	if v, ok := reportedToTheEnd(c); !ok {
		return v
	}
	if len(held) < need {
		return Verdict{State: Waiting, Reason: fmt.Sprintf("%d of %d members hold the NodeFence; %d needed", len(held), len(members), need)}
	}
	from := majority
	if c.LastLife.After(from) {
		from = c.LastLife
	}
	until := from.Add(p.Isolation + 2*t)
	if now.Before(until) {
		return Verdict{State: Waiting, Until: until, Reason: fmt.Sprintf("a majority held the NodeFence at %s; reset certain at %s", stamp(majority), stamp(until))}
	}
	return Verdict{State: Verified, Reason: fmt.Sprintf("a majority held the NodeFence at %s, no sign of life since %s, watchdog timeout %s, isolation %s",
		stamp(majority), stamp(from), t, p.Isolation)}
}

// eligible checks that the node's watchdog can be counted on at all: armed, a real
// device (or a test's), on the node's boot and member list.
func eligible(c Case, p Params) (Verdict, bool) {
	no := func(format string, args ...any) (Verdict, bool) {
		return Verdict{State: Ineligible, Reason: fmt.Sprintf(format, args...)}, false
	}
	r := c.Report
	switch {
	case r == nil:
		return no("the node's agent never reported")
	case c.ArmedBefore.IsZero() || c.Visible.Sub(c.ArmedBefore) > p.ReportMaxAge:
		return no("no report of an armed watchdog within %s before the NodeFence", p.ReportMaxAge)
	case !r.Armed || r.Timeout <= 0:
		return no("the agent's latest report says its watchdog is not armed")
	case r.Emulated && !p.AllowEmulated:
		return no("the agent feeds an emulated watchdog, which resets no machine (watchdog.allowEmulated counts it, in test clusters only)")
	case r.Every <= 0:
		return no("the agent's latest report does not say how often it reports (an agent older than this controller)")
	case r.BootID == "" || r.BootID != c.BootID:
		return no("the agent reported boot %q, the node runs boot %q", r.BootID, c.BootID)
	case len(distinct(r.Members)) != len(r.Members):
		return no("the agent's member list names a node twice")
	case !sameSet(r.Members, c.Members):
		return no("the agent's member list (%d nodes) is not the cluster's (%d nodes)", len(r.Members), len(c.Members))
	case !c.NewestMember.Before(r.At):
		return no("a node joined at %s, after the agent's report at %s", stamp(c.NewestMember), stamp(r.At))
	}
	return Verdict{}, true
}

// reportedToTheEnd checks that the node's agent reported up to the node's last sign of
// life. An agent that stops while its node lives writes a last report saying it
// disarms, and disarms only once that report is written; but the controller may miss
// that report, and an older agent writes none. So a node whose kubelet was seen alive
// more than two report intervals after its agent's latest report, or whose agent left
// its peers after that report, is not counted: its watchdog may be disarmed while the
// node runs. A real partition silences the kubelet and the agent together, and leaves
// no goodbye.
func reportedToTheEnd(c Case) (Verdict, bool) {
	r := c.Report
	no := func(format string, args ...any) (Verdict, bool) {
		return Verdict{State: Ineligible, Reason: fmt.Sprintf(format, args...)}, false
	}
	switch {
	case c.KubeletLife.Sub(r.At) > 2*r.Every:
		return no("the node's kubelet was seen alive at %s, %s after its agent's latest report (%s), more than two report intervals of %s: the agent went quiet while its node lived",
			stamp(c.KubeletLife), c.KubeletLife.Sub(r.At).Round(time.Millisecond), stamp(r.At), r.Every)
	case c.AgentLeft.After(r.At):
		return no("the agent left its peers at %s, after its latest report (%s): it was stopped, and may have disarmed its watchdog",
			stamp(c.AgentLeft), stamp(r.At))
	}
	return Verdict{}, true
}

func sameSet(a, b []string) bool {
	return slices.Equal(distinct(a), distinct(b))
}

// distinct is names sorted, each once.
func distinct(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
