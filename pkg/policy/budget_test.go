package policy

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// fleet plays the controller's part over time on a fake clock: it asks Decide about
// every unhealthy node that has no fence yet, starts a fence on Fence, and finishes each
// fence after its node's duration.
type fleet struct {
	policy   *v1alpha1.Policy
	cluster  Cluster
	duration map[string]time.Duration
	started  map[string]time.Time
	finished map[string]time.Time
	verdicts map[string]Decision
}

func (f *fleet) step(now time.Time) (started []string) {
	for i := range f.cluster.Nodes {
		n := &f.cluster.Nodes[i]
		if n.Fencing && !now.Before(f.started[n.Name].Add(f.duration[n.Name])) {
			n.Fencing, f.finished[n.Name] = false, now
		}
	}
	for i := range f.cluster.Nodes {
		n := &f.cluster.Nodes[i]
		if !n.Health.Unhealthy || n.Fencing || !f.started[n.Name].IsZero() {
			continue
		}
		d := Decide(f.policy, *n, f.cluster, now)
		f.verdicts[n.Name] = d
		if d.Verdict == Fence {
			n.Fencing, n.LastFencedAt, f.started[n.Name] = true, now, now
			f.cluster.FenceStarts = append(f.cluster.FenceStarts, now)
			started = append(started, n.Name)
		}
	}
	return started
}

func (f *fleet) fencing() int {
	k := 0
	for _, n := range f.cluster.Nodes {
		if n.Fencing {
			k++
		}
	}
	return k
}

func newFleet(p *v1alpha1.Policy, total int, durations ...time.Duration) *fleet {
	f := &fleet{policy: p, cluster: Cluster{Nodes: nodes("n", total, nil)}, duration: map[string]time.Duration{},
		started: map[string]time.Time{}, finished: map[string]time.Time{}, verdicts: map[string]Decision{}}
	for i, d := range durations {
		f.cluster.Nodes[i].Health.Unhealthy = true
		f.duration[f.cluster.Nodes[i].Name] = d
	}
	return f
}

func TestMaxConcurrentTwoOfFiveDead(t *testing.T) {
	p := testPolicy(func(p *v1alpha1.Policy) { p.Budget.MaxConcurrent = 2 })
	// n-0 finishes first (20s), then n-1 (45s); each later fence takes 30s.
	f := newFleet(p, 20, 45*time.Second, 20*time.Second, 30*time.Second, 30*time.Second, 30*time.Second)

	if got := f.step(t0); fmt.Sprint(got) != "[n-0 n-1]" {
		t.Fatalf("at t0 started %v, want [n-0 n-1]", got)
	}
	for _, n := range []string{"n-2", "n-3", "n-4"} {
		if d := f.verdicts[n]; d.Verdict != Wait || d.Reason != ReasonMaxConcurrent {
			t.Errorf("at t0 %s: %s %s (%s), want Wait %s", n, d.Verdict, d.Reason, d.Message, ReasonMaxConcurrent)
		}
	}
	want := map[time.Duration][]string{20 * time.Second: {"n-2"}, 45 * time.Second: {"n-3"}, 50 * time.Second: {"n-4"}}
	for at := time.Second; at <= 2*time.Minute; at += time.Second {
		got := f.step(t0.Add(at))
		if fmt.Sprint(got) != fmt.Sprint(want[at]) {
			t.Errorf("at +%s started %v, want %v", at, got, want[at])
		}
		if k := f.fencing(); k > 2 {
			t.Fatalf("at +%s %d fencing, maxConcurrent is 2", at, k)
		}
	}
	if len(f.finished) != 5 {
		t.Errorf("%d of 5 fences finished: %v", len(f.finished), f.finished)
	}
}

func TestDryRunTouchesNothing(t *testing.T) {
	p := testPolicy(func(p *v1alpha1.Policy) { p.DryRun = true; p.Budget.MaxConcurrent = 2 })
	f := newFleet(p, 20, time.Second, time.Second, time.Second, time.Second, time.Second)
	for at := time.Duration(0); at < time.Minute; at += time.Second {
		if got := f.step(t0.Add(at)); len(got) > 0 {
			t.Fatalf("dry run started fences %v", got)
		}
	}
	for i := range 5 {
		name := fmt.Sprintf("n-%d", i)
		if d := f.verdicts[name]; d.Verdict != WouldFence || d.Reason != ReasonDryRun {
			t.Errorf("%s: %s %s, want WouldFence %s", name, d.Verdict, d.Reason, ReasonDryRun)
		}
	}
	if len(f.cluster.FenceStarts) != 0 || f.fencing() != 0 {
		t.Errorf("dry run left %d fence starts and %d fencing nodes", len(f.cluster.FenceStarts), f.fencing())
	}
}

func TestRateLimitOverTime(t *testing.T) {
	// 1 fence per minute, burst 2, four dead nodes each fenced in a second: two at once,
	// then one a minute.
	p := testPolicy(func(p *v1alpha1.Policy) { p.Budget.RateLimit = v1alpha1.RateLimit{FencesPerMinute: 1, Burst: 2} })
	f := newFleet(p, 20, time.Second, time.Second, time.Second, time.Second)
	var starts []time.Duration
	for at := time.Duration(0); at <= 3*time.Minute; at += time.Second {
		for range f.step(t0.Add(at)) {
			starts = append(starts, at)
		}
	}
	if fmt.Sprint(starts) != "[0s 0s 1m0s 2m0s]" {
		t.Errorf("fences started at %v, want [0s 0s 1m0s 2m0s]", starts)
	}
}

func TestNextToken(t *testing.T) {
	rl := v1alpha1.RateLimit{FencesPerMinute: 6, Burst: 3} // a token every 10s
	ago := func(d ...time.Duration) []time.Time {
		var out []time.Time
		for _, x := range d {
			out = append(out, t0.Add(-x))
		}
		return out
	}
	tests := map[string]struct {
		rl     v1alpha1.RateLimit
		starts []time.Time
		ok     bool
		next   time.Time
	}{
		"no limit":                       {rl: v1alpha1.RateLimit{}, starts: ago(0, 0, 0, 0), ok: true, next: t0},
		"full bucket":                    {rl: rl, ok: true, next: t0},
		"two of three spent":             {rl: rl, starts: ago(0, 0), ok: true, next: t0},
		"all spent just now":             {rl: rl, starts: ago(0, 0, 0), next: t0.Add(10 * time.Second)},
		"all spent 4s ago":               {rl: rl, starts: ago(4*time.Second, 4*time.Second, 4*time.Second), next: t0.Add(6 * time.Second)},
		"all spent, one refilled":        {rl: rl, starts: ago(10*time.Second, 10*time.Second, 10*time.Second), ok: true, next: t0},
		"forced fences beyond the burst": {rl: rl, starts: ago(0, 0, 0, 0, 0), next: t0.Add(30 * time.Second)},
		"order does not matter":          {rl: rl, starts: ago(0, 5*time.Second, 2*time.Second), next: t0.Add(5 * time.Second)},
		"starts after now are ignored":   {rl: rl, starts: ago(-time.Second, -time.Second, -time.Second), ok: true, next: t0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			next, ok := NextToken(tc.rl, tc.starts, t0)
			if ok != tc.ok || !next.Equal(tc.next) {
				t.Errorf("NextToken = %s, %v; want %s, %v", next.Sub(t0), ok, tc.next.Sub(t0), tc.ok)
			}
		})
	}
	if w := RateWindow(v1alpha1.Budget{RateLimit: rl}); w != 30*time.Second {
		t.Errorf("RateWindow = %s, want 30s", w)
	}
}

// BenchmarkDecide5000 is the decision for one node in a snapshot of 5,000 nodes in 10
// zones, 3 of them control plane, 40 unhealthy and 6 fencing, with a rate limit.
func BenchmarkDecide5000(b *testing.B) {
	p := testPolicy(maxUnhealthy(intstr.FromString("10%")), func(p *v1alpha1.Policy) {
		p.Budget.RateLimit = v1alpha1.RateLimit{FencesPerMinute: 10, Burst: 10}
	})
	cl := Cluster{}
	for i := range 5000 {
		lbl := map[string]string{ZoneLabel: fmt.Sprintf("zone-%d", i%10), "kubernetes.io/hostname": fmt.Sprintf("n-%d", i)}
		if i < 3 {
			lbl[ControlPlaneLabel] = ""
		}
		n := NewNode(p, fmt.Sprintf("n-%d", i), lbl)
		n.Health.Unhealthy = i%125 == 7
		n.Fencing = n.Health.Unhealthy && i < 700
		cl.Nodes = append(cl.Nodes, n)
	}
	for i := range 5 {
		cl.FenceStarts = append(cl.FenceStarts, t0.Add(-time.Duration(i)*10*time.Second))
	}
	node := cl.Nodes[4007]
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if d := Decide(p, node, cl, t0); d.Verdict != Fence {
			b.Fatalf("Decide = %+v", d)
		}
	}
}
