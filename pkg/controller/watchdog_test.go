package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/nodeagentwatch"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

// watchdogConfig has one policy whose only level is the node's watchdog.
func watchdogConfig() *v1alpha1.Config {
	cfg := &v1alpha1.Config{Policies: []v1alpha1.Policy{{Name: "default", Levels: []v1alpha1.Level{{Watchdog: true}}}}}
	cfg.Default()
	return cfg
}

// report is node's agent reporting at the fixture's clock, every 30s: a watchdog device
// armed at 5s unless not, on node's boot, the three nodes as members, holding incidents.
func (f *fixture) report(node string, armed bool, holds ...string) {
	f.t.Helper()
	f.reportOf(node, nodeagent.WatchdogReport{Kind: watchdog.KindDevice, Armed: armed}, holds...)
}

// reportOf is report with its watchdog as given (its timeout 5s while armed).
func (f *fixture) reportOf(node string, wd nodeagent.WatchdogReport, holds ...string) {
	f.t.Helper()
	f.reports++
	r := nodeagent.Report{BootID: "boot-" + node, Isolation: "10s", ReportInterval: "30s", Holds: holds,
		Members: nodeagent.MembersOf([]string{"node-1", "node-2", "node-3"}), Watchdog: wd}
	if wd.Armed {
		r.Watchdog.Timeout = "5s"
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultLeaseNamespace, Name: nodeagent.LeaseName(node),
		ResourceVersion: fmt.Sprint(f.reports)}}
	if err := r.Encode(l, node); err != nil {
		f.t.Fatal(err)
	}
	f.agents().ObserveReport(l)
}

// agents is the loop's watch on the node agents.
func (f *fixture) agents() *nodeagentwatch.Watch {
	return f.c.peers.agents.(*nodeagentwatch.Watch)
}

func (f *fixture) attempt(node string) v1alpha1.Attempt {
	f.t.Helper()
	nf := f.incident(node)
	if len(nf.Status.Attempts) != 1 {
		f.t.Fatalf("incident of %s: attempts %+v, want one", node, nf.Status.Attempts)
	}
	return nf.Status.Attempts[0]
}

// watchdogIncident is node-1's incident a minute after every node's agent reported an
// armed watchdog, once node-1 stopped renewing: fencing through its watchdog.
func watchdogIncident(t *testing.T) (*fixture, *v1alpha1.NodeFence) {
	f := newFixture(t, watchdogConfig(), threeNodes()...)
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		f.report(n, true)
	}
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	return f, f.incident("node-1")
}

// TestFixtureWatchdogLevel: a node that stopped renewing is counted fenced through its
// watchdog only once a majority of the members held its incident, and then isolation
// plus two watchdog timeouts passed with no sign of life; nothing is called.
func TestFixtureWatchdogLevel(t *testing.T) {
	f, nf := watchdogIncident(t)
	if a := f.attempt("node-1"); nf.Status.Phase != v1alpha1.PhaseFencing || a.Agent != v1alpha1.WatchdogAgent || a.State != v1alpha1.AttemptVerifying {
		t.Fatalf("phase %s attempt %+v, want Fencing with the watchdog attempt verifying", nf.Status.Phase, a)
	}
	// One member holding it is not a majority of three.
	f.clock.Step(time.Second)
	f.report("node-2", true, nf.Name)
	f.clock.Step(10 * time.Second)
	f.sync("node-1")
	if a := f.attempt("node-1"); a.State != v1alpha1.AttemptVerifying {
		t.Fatalf("attempt %+v with one member of three holding the incident, want still verifying", a)
	}
	held := f.clock.Now()
	f.report("node-3", true, nf.Name)
	// Isolation (10s) and two timeouts (5s) after the majority held it.
	f.verifiedAt(held.Add(20 * time.Second))
	if nf = f.incident("node-1"); nf.Status.Phase != v1alpha1.PhaseRemediated {
		t.Fatalf("phase %s once the node must have reset, want Remediated", nf.Status.Phase)
	}
	f.expectCalls()
}

// verifiedAt checks that node-1's watchdog attempt still verifies a millisecond before
// at, and is verified at it.
func (f *fixture) verifiedAt(at time.Time) {
	f.t.Helper()
	f.clock.Set(at.Add(-time.Millisecond))
	f.sync("node-1")
	if a := f.attempt("node-1"); a.State != v1alpha1.AttemptVerifying {
		f.t.Fatalf("attempt %+v at %s, before the node must have reset, want still verifying", a, f.clock.Now())
	}
	f.clock.Set(at)
	f.sync("node-1")
	if a := f.attempt("node-1"); a.State != v1alpha1.AttemptVerified {
		f.t.Fatalf("attempt %+v at %s, once the node must have reset, want verified", a, f.clock.Now())
	}
}

// TestFixtureWatchdogSignOfLife: a report of the node while it waits moves the wait on;
// one after it must have reset contradicts the fence, which is then never verified.
func TestFixtureWatchdogSignOfLife(t *testing.T) {
	f, nf := watchdogIncident(t)
	held := f.clock.Now()
	f.report("node-2", true, nf.Name)
	f.report("node-3", true, nf.Name)
	// The node's agent writes once more, 4s later: it was alive then.
	f.clock.Set(held.Add(4 * time.Second))
	f.report("node-1", true)
	f.clock.Set(held.Add(23 * time.Second))
	f.sync("node-1")
	if a := f.attempt("node-1"); a.State != v1alpha1.AttemptVerifying {
		t.Fatalf("attempt %+v 20s after the majority but 19s after the node's last report, want still verifying", a)
	}
	// Alive 23.5s after the majority held it: past its reset (15s) by more than a timeout.
	f.clock.Set(held.Add(23500 * time.Millisecond))
	f.report("node-1", true)
	f.clock.Set(held.Add(24 * time.Second))
	f.sync("node-1")
	nf = f.incident("node-1")
	if a := f.attempt("node-1"); a.State != v1alpha1.AttemptFailed || nf.Status.Phase != v1alpha1.PhaseFailed || !strings.Contains(a.Error, "contradicted: sign of life") {
		t.Fatalf("phase %s attempt %+v after a sign of life past the reset, want the attempt failed as contradicted and the incident Failed", nf.Status.Phase, a)
	}
	f.expectEvents(v1alpha1.ReasonFenceStarted, v1alpha1.ReasonFenceContradicted, v1alpha1.ReasonFenceFailed)
}

// TestFixtureWatchdogIneligible: a node whose agent never reported an armed watchdog is
// never fenced through that level: the level fails at once, saying why.
func TestFixtureWatchdogIneligible(t *testing.T) {
	for name, tc := range map[string]struct {
		report func(f *fixture)
		want   string
	}{
		"never reported": {func(*fixture) {}, "no report from its node agent"},
		"not armed":      {func(f *fixture) { f.report("node-1", false) }, "no report of an armed watchdog"},
		"other boot": {func(f *fixture) {
			f.report("node-1", true)
			n := fixtureNode("node-1", "boot-new", false)
			f.cache(n)
		}, `the agent reported boot "boot-node-1", the node runs boot "boot-new"`},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, watchdogConfig(), threeNodes()...)
			tc.report(f)
			f.clock.Set(f0.Add(time.Minute))
			f.renewAllBut("node-1")
			f.sync("node-1")
			nf := f.incident("node-1")
			if nf.Status.Phase != v1alpha1.PhaseFailed || !strings.Contains(nf.Status.Message, tc.want) {
				t.Errorf("phase %s message %q, want Failed saying %q", nf.Status.Phase, nf.Status.Message, tc.want)
			}
		})
	}
}

// TestFixtureWatchdogAfterTakeover: a replica that takes over while a watchdog fence
// waits never saw the node's armed report before the incident started fencing, but the
// attempt passed its Fence step, which only an eligible node does: it counts the node
// fenced once the wait has passed on its own observations.
func TestFixtureWatchdogAfterTakeover(t *testing.T) {
	f, nf := watchdogIncident(t)
	// The new leader's memory of the reports starts now, 5s later.
	f.clock.Step(5 * time.Second)
	w, err := nodeagentwatch.New(nodeagentwatch.Options{Config: f.c.cfg, Caches: f.c.opts.Caches, Detector: f.c.detector, Incidents: f.c.store,
		Queue: f.c.queue, Now: func() time.Time { return f.clock.Now() }, Identity: "me"})
	if err != nil {
		t.Fatal(err)
	}
	f.c.peers.agents = w
	seen := f.clock.Now()
	f.report("node-1", true)
	f.report("node-2", true, nf.Name)
	f.report("node-3", true, nf.Name)
	f.verifiedAt(seen.Add(20 * time.Second))
}
