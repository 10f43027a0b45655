package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testPolicy is a defaulted policy changed by opts.
func testPolicy(opts ...func(*v1alpha1.Policy)) *v1alpha1.Policy {
	p := &v1alpha1.Policy{Name: "p", Levels: []v1alpha1.Level{{Agents: []string{"a"}}}}
	for _, o := range opts {
		o(p)
	}
	p.Default()
	return p
}

func maxUnhealthy(v intstr.IntOrString) func(*v1alpha1.Policy) {
	return func(p *v1alpha1.Policy) { p.Budget.MaxUnhealthy = &v }
}

// nodes makes n healthy nodes named prefix-i with the given labels.
func nodes(prefix string, n int, lbl map[string]string) []Node {
	out := make([]Node, n)
	for i := range out {
		out[i] = NewNode(testPolicy(), fmt.Sprintf("%s-%d", prefix, i), lbl)
	}
	return out
}

func dead(ns []Node, idx ...int) []Node {
	for _, i := range idx {
		ns[i].Health.Unhealthy = true
	}
	return ns
}

// inMaintenance puts the first node under maintenance, silent since since.
func inMaintenance(ns []Node, since time.Time) []Node {
	ns[0].Holds.Maintenance, ns[0].Health.SilentSince = "NodeMaintenance nm-1 names it", since
	return ns
}

func TestDecide(t *testing.T) {
	zone := func(z string) map[string]string { return map[string]string{ZoneLabel: z} }
	cp := map[string]string{ControlPlaneLabel: ""}
	off := false
	tests := map[string]struct {
		policy  *v1alpha1.Policy
		nodes   []Node
		node    int // index into nodes of the node decided
		cluster func(*Cluster)
		verdict Verdict
		reason  string
		until   time.Time
		message string // substring
	}{
		"healthy node: nothing to decide": {
			policy: testPolicy(), nodes: nodes("n", 3, nil), verdict: None, reason: ReasonHealthy,
		},
		"bad evidence below the threshold: wait until it passes": {
			policy: testPolicy(), nodes: func() []Node { ns := nodes("n", 3, nil); ns[0].Health.UnhealthyAt = t0.Add(7 * time.Second); return ns }(),
			verdict: Wait, reason: ReasonNotYet, until: t0.Add(7 * time.Second),
		},
		"one of ten dead: fence": {
			policy: testPolicy(), nodes: dead(nodes("n", 10, nil), 0), verdict: Fence, reason: ReasonWithinBudget,
			message: "1 of 10 nodes",
		},
		"40% down with maxUnhealthy 30%: hold": {
			policy: testPolicy(maxUnhealthy(intstr.FromString("30%"))), nodes: dead(nodes("n", 10, nil), 0, 1, 2, 3),
			verdict: Hold, reason: ReasonStorm, message: "4 of 10 nodes governed by policy p are unhealthy, maxUnhealthy 30% allows 3",
		},
		"30% down with maxUnhealthy 30%: fence": {
			policy: testPolicy(maxUnhealthy(intstr.FromString("30%"))), nodes: dead(nodes("n", 10, nil), 0, 1, 2),
			verdict: Fence, reason: ReasonWithinBudget,
		},
		// Two of three nodes die together; the first crosses the threshold while the
		// other is still suspect. Fencing it would be fencing the first of a storm.
		"one dead and one suspect, one allowed: wait for the suspect": {
			policy: testPolicy(maxUnhealthy(intstr.FromInt32(1))),
			nodes: func() []Node {
				ns := dead(nodes("n", 3, nil), 0)
				ns[1].Health.Suspect, ns[1].Health.UnhealthyAt = true, t0.Add(150*time.Millisecond)
				return ns
			}(),
			verdict: Wait, reason: ReasonStormPending, until: t0.Add(150 * time.Millisecond),
			message: "1 of 3 nodes governed by policy p are unhealthy and 1 more suspect, maxUnhealthy 1 allows 1",
		},
		"the suspect turned unhealthy: hold both": {
			policy: testPolicy(maxUnhealthy(intstr.FromInt32(1))), nodes: dead(nodes("n", 3, nil), 0, 1),
			verdict: Hold, reason: ReasonStorm,
		},
		"a suspect within the budget does not delay a fence": {
			policy: testPolicy(maxUnhealthy(intstr.FromInt32(2))),
			nodes: func() []Node {
				ns := dead(nodes("n", 4, nil), 0)
				ns[1].Health.Suspect, ns[1].Health.UnhealthyAt = true, t0.Add(time.Second)
				return ns
			}(),
			verdict: Fence, reason: ReasonWithinBudget,
		},
		"a suspect with an open incident counts once, as unhealthy": {
			policy: testPolicy(maxUnhealthy(intstr.FromInt32(2))),
			nodes: func() []Node {
				ns := dead(nodes("n", 4, nil), 0)
				ns[1].Health.Suspect, ns[1].Incident = true, true
				return ns
			}(),
			verdict: Fence, reason: ReasonWithinBudget,
		},
		"maxUnhealthy as a count: 3 down with 2 allowed: hold": {
			policy: testPolicy(maxUnhealthy(intstr.FromInt32(2))), nodes: dead(nodes("n", 100, nil), 5, 6, 7), node: 5,
			verdict: Hold, reason: ReasonStorm,
		},
		// Three healthy nodes of three were once powered off one after the other,
		// because a fenced node dropped out of the count once a new leader's clocks
		// restarted. A node with an open incident counts until it is back.
		"one node fenced and not back, a second unhealthy, 3 nodes at 40%: hold": {
			policy: testPolicy(),
			nodes: func() []Node {
				ns := dead(nodes("n", 3, nil), 1)
				ns[0].Incident = true
				return ns
			}(),
			node: 1, verdict: Hold, reason: ReasonStorm, message: "2 of 3 nodes",
		},
		"a fenced node that looks healthy to a fresh leader still counts": {
			policy: testPolicy(maxUnhealthy(intstr.FromString("30%"))),
			nodes: func() []Node {
				ns := dead(nodes("n", 10, nil), 0, 1, 2)
				ns[3].Incident = true
				return ns
			}(),
			verdict: Hold, reason: ReasonStorm, message: "4 of 10 nodes",
		},
		"a live controller replica on the node: hold, before anything else": {
			policy: testPolicy(func(p *v1alpha1.Policy) { p.Paused = true }),
			nodes: func() []Node {
				ns := dead(nodes("n", 10, nil), 0)
				ns[0].Holds.ControllerHere = "this replica runs on it"
				return ns
			}(),
			verdict: Hold, reason: ReasonControllerHere, message: "this replica runs on it",
		},
		"a standby replica renewing on the node: hold, lifting when its renewals lapse": {
			policy: testPolicy(),
			nodes: func() []Node {
				ns := dead(nodes("n", 10, nil), 0)
				ns[0].Holds.ControllerHere, ns[0].Holds.ControllerHereUntil = "replica b was last seen renewing", t0.Add(2500*time.Millisecond)
				return ns
			}(),
			verdict: Hold, reason: ReasonControllerHere, message: "replica b was last seen renewing", until: t0.Add(2500 * time.Millisecond),
		},
		"its fence device read off while it lived: hold": {
			policy: testPolicy(),
			nodes: func() []Node {
				ns := dead(nodes("n", 10, nil), 0)
				ns[0].Holds.TargetReadsOff = "agent ipmi read target 10.0.0.9 off"
				return ns
			}(),
			verdict: Hold, reason: ReasonTargetReadsOff, message: "agent ipmi read target 10.0.0.9 off",
		},
		"a fenced node in a zone keeps the zone from counting as lit": {
			policy: testPolicy(maxUnhealthy(intstr.FromString("50%"))),
			nodes: func() []Node {
				ns := dead(append(nodes("a", 3, zone("a")), nodes("b", 3, zone("b"))...), 0, 1)
				ns[2].Incident = true
				return ns
			}(),
			verdict: Hold, reason: ReasonZoneDark,
		},
		"a whole zone dark: hold": {
			policy:  testPolicy(maxUnhealthy(intstr.FromString("50%"))),
			nodes:   dead(append(nodes("a", 3, zone("a")), nodes("b", 3, zone("b"))...), 0, 1, 2),
			verdict: Hold, reason: ReasonZoneDark, message: "no node of zone a is healthy",
		},
		"a zone whose last live node is suspect counts as dark": {
			policy: testPolicy(maxUnhealthy(intstr.FromString("50%"))),
			nodes: func() []Node {
				ns := dead(append(nodes("a", 3, zone("a")), nodes("b", 3, zone("b"))...), 0, 1)
				ns[2].Health.Suspect = true
				return ns
			}(),
			verdict: Hold, reason: ReasonZoneDark,
		},
		"a zone with a live node left: fence": {
			policy:  testPolicy(maxUnhealthy(intstr.FromString("50%"))),
			nodes:   dead(append(nodes("a", 3, zone("a")), nodes("b", 3, zone("b"))...), 0, 1),
			verdict: Fence, reason: ReasonWithinBudget,
		},
		"a dark zone with perZone off: fence": {
			policy:  testPolicy(maxUnhealthy(intstr.FromString("50%")), func(p *v1alpha1.Policy) { p.Budget.PerZone = &off }),
			nodes:   dead(append(nodes("a", 3, zone("a")), nodes("b", 3, zone("b"))...), 0, 1, 2),
			verdict: Fence, reason: ReasonWithinBudget,
		},
		"fenced 5 minutes ago, cooldown 10m: wait until it ends": {
			policy: testPolicy(),
			nodes: func() []Node {
				ns := dead(nodes("n", 10, nil), 0)
				ns[0].LastFencedAt = t0.Add(-5 * time.Minute)
				return ns
			}(),
			verdict: Wait, reason: ReasonCooldown, until: t0.Add(5 * time.Minute),
		},
		"fenced 11 minutes ago, cooldown 10m: fence": {
			policy: testPolicy(),
			nodes: func() []Node {
				ns := dead(nodes("n", 10, nil), 0)
				ns[0].LastFencedAt = t0.Add(-11 * time.Minute)
				return ns
			}(),
			verdict: Fence, reason: ReasonWithinBudget,
		},
		"policy paused: hold": {
			policy: testPolicy(func(p *v1alpha1.Policy) { p.Paused = true }), nodes: dead(nodes("n", 10, nil), 0),
			verdict: Hold, reason: ReasonPaused, message: "policy p is paused",
		},
		"cluster paused, even within budget: hold": {
			policy: testPolicy(), nodes: dead(nodes("n", 10, nil), 0), cluster: func(c *Cluster) { c.Paused = true },
			verdict: Hold, reason: ReasonPaused, message: "cluster-wide",
		},
		"paused during a storm reports the pause": {
			policy: testPolicy(func(p *v1alpha1.Policy) { p.Paused = true }), nodes: dead(nodes("n", 2, nil), 0, 1),
			verdict: Hold, reason: ReasonPaused,
		},
		"policy dry run: would fence": {
			policy: testPolicy(func(p *v1alpha1.Policy) { p.DryRun = true }), nodes: dead(nodes("n", 10, nil), 0),
			verdict: WouldFence, reason: ReasonDryRun, message: "dry run, would fence",
		},
		"cluster dry run: would fence": {
			policy: testPolicy(), nodes: dead(nodes("n", 10, nil), 0), cluster: func(c *Cluster) { c.DryRun = true },
			verdict: WouldFence, reason: ReasonDryRun,
		},
		"dry run in a storm: the hold is reported, not a would-fence": {
			policy: testPolicy(func(p *v1alpha1.Policy) { p.DryRun = true }), nodes: dead(nodes("n", 10, nil), 0, 1, 2, 3, 4),
			verdict: Hold, reason: ReasonStorm,
		},
		"excluded by label: hold": {
			policy: testPolicy(), nodes: dead(nodes("n", 10, map[string]string{v1alpha1.DefaultExcludeLabel: "true"}), 0),
			verdict: Hold, reason: ReasonExcluded, message: v1alpha1.DefaultExcludeLabel,
		},
		"under maintenance within the window: hold until it ends": {
			policy:  testPolicy(),
			nodes:   inMaintenance(dead(nodes("n", 10, nil), 0), t0.Add(-10*time.Minute)),
			verdict: Hold, reason: ReasonMaintenance, until: t0.Add(50 * time.Minute), message: "NodeMaintenance nm-1",
		},
		"under maintenance past the window: fence": {
			policy:  testPolicy(func(p *v1alpha1.Policy) { p.Maintenance.MaxWindow.Duration = 10 * time.Minute }),
			nodes:   inMaintenance(dead(nodes("n", 10, nil), 0), t0.Add(-10*time.Minute)),
			verdict: Fence, reason: ReasonWithinBudget,
		},
		"under maintenance with no known silence: hold with no end": {
			policy:  testPolicy(),
			nodes:   inMaintenance(dead(nodes("n", 10, nil), 0), time.Time{}),
			verdict: Hold, reason: ReasonMaintenance, message: "held while it lasts",
		},
		"under maintenance in a storm: the maintenance is reported": {
			policy: testPolicy(maxUnhealthy(intstr.FromString("30%"))), nodes: inMaintenance(dead(nodes("n", 10, nil), 0, 1, 2, 3), t0),
			verdict: Hold, reason: ReasonMaintenance, until: t0.Add(time.Hour),
		},
		"nothing to release with skipIfNothingToRelease: hold": {
			policy:  testPolicy(func(p *v1alpha1.Policy) { p.SkipIfNothingToRelease = true }),
			nodes:   func() []Node { ns := dead(nodes("n", 10, nil), 0); ns[0].Workload.NothingToRelease = true; return ns }(),
			verdict: Hold, reason: ReasonNothingToRelease,
		},
		"nothing to release without the option: fence": {
			policy:  testPolicy(),
			nodes:   func() []Node { ns := dead(nodes("n", 10, nil), 0); ns[0].Workload.NothingToRelease = true; return ns }(),
			verdict: Fence, reason: ReasonWithinBudget,
		},
		"control-plane node while another one fences: wait": {
			policy: testPolicy(),
			nodes: func() []Node {
				ns := dead(append(nodes("cp", 3, cp), nodes("w", 7, nil)...), 0, 1)
				ns[1].Fencing = true
				return ns
			}(),
			verdict: Wait, reason: ReasonControlPlane,
		},
		"control-plane node while a worker fences: fence": {
			policy: testPolicy(),
			nodes: func() []Node {
				ns := dead(append(nodes("cp", 3, cp), nodes("w", 7, nil)...), 0, 3)
				ns[3].Fencing = true
				return ns
			}(),
			verdict: Fence, reason: ReasonWithinBudget,
		},
		"control plane one at a time off: fence": {
			policy: testPolicy(func(p *v1alpha1.Policy) { p.Budget.ControlPlaneOneAtATime = &off }),
			nodes: func() []Node {
				ns := dead(append(nodes("cp", 3, cp), nodes("w", 7, nil)...), 0, 1)
				ns[1].Fencing = true
				return ns
			}(),
			verdict: Fence, reason: ReasonWithinBudget,
		},
		"rate limit spent: wait for the next token": {
			policy:  testPolicy(func(p *v1alpha1.Policy) { p.Budget.RateLimit = v1alpha1.RateLimit{FencesPerMinute: 2, Burst: 1} }),
			nodes:   dead(nodes("n", 10, nil), 0),
			cluster: func(c *Cluster) { c.FenceStarts = []time.Time{t0.Add(-10 * time.Second)} },
			verdict: Wait, reason: ReasonRateLimited, until: t0.Add(20 * time.Second),
		},
		"rate limit with a token left: fence": {
			policy:  testPolicy(func(p *v1alpha1.Policy) { p.Budget.RateLimit = v1alpha1.RateLimit{FencesPerMinute: 2, Burst: 1} }),
			nodes:   dead(nodes("n", 10, nil), 0),
			cluster: func(c *Cluster) { c.FenceStarts = []time.Time{t0.Add(-31 * time.Second)} },
			verdict: Fence, reason: ReasonWithinBudget,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cl := Cluster{Nodes: tc.nodes}
			if tc.cluster != nil {
				tc.cluster(&cl)
			}
			d := Decide(tc.policy, tc.nodes[tc.node], cl, t0)
			if d.Verdict != tc.verdict || d.Reason != tc.reason || !d.Until.Equal(tc.until) {
				t.Errorf("Decide = %s %s until %s (%q), want %s %s until %s",
					d.Verdict, d.Reason, d.Until, d.Message, tc.verdict, tc.reason, tc.until)
			}
			if !strings.Contains(d.Message, tc.message) || d.Message == "" {
				t.Errorf("message %q, want it to contain %q", d.Message, tc.message)
			}
		})
	}
}
