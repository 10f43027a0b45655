package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

// TestFixtureWatchdogQuietAgent: node-1's agent reported an armed watchdog (every 30s) and
// then went quiet, as an agent does that a rollout stopped and nothing replaced; its
// kubelet renewed on, and then stopped (the node cut off). Renewals more than two report
// intervals after the agent's last report make the level fail at once, saying why, and
// nothing is released; a kubelet that went quiet with its agent (a real partition) leaves
// the node eligible.
func TestFixtureWatchdogQuietAgent(t *testing.T) {
	for name, tc := range map[string]struct {
		lastRenewal time.Duration // after the agent's last report
		failed      string
	}{
		"the kubelet renewed 65s on":              {65 * time.Second, "the agent went quiet while its node lived"},
		"a partition silenced both (50s, within)": {50 * time.Second, ""},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, watchdogConfig(), threeNodes()...)
			for _, n := range []string{"node-1", "node-2", "node-3"} {
				f.report(n, true)
			}
			for at := 5 * time.Second; at <= tc.lastRenewal; at += 5 * time.Second {
				f.clock.Set(f0.Add(at))
				f.renewAllBut()
			}
			// The API server holds node-1's last renewal too, for the live read before an
			// incident opens.
			if _, err := f.kube.CoordinationV1().Leases(NodeLeaseNamespace).Update(context.Background(), fixtureLease("node-1", f.clock.Now()), metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			f.clock.Set(f0.Add(tc.lastRenewal + 45*time.Second))
			f.renewAllBut("node-1")
			f.sync("node-1")
			nf := f.incident("node-1")
			switch {
			case tc.failed != "" && (nf.Status.Phase != v1alpha1.PhaseFailed || !strings.Contains(nf.Status.Message, tc.failed)):
				t.Errorf("phase %s message %q, want Failed saying %q", nf.Status.Phase, nf.Status.Message, tc.failed)
			case tc.failed == "" && f.attempt("node-1").State != v1alpha1.AttemptVerifying:
				t.Errorf("phase %s attempt %+v, want the watchdog attempt verifying", nf.Status.Phase, f.attempt("node-1"))
			}
			f.expectCalls()
		})
	}
}

// TestFixtureWatchdogHoldWithdrawn: a member whose report stops holding the NodeFence (its
// agent restarted and has not read it yet) holds it no more; the majority, and the wait,
// count from when it holds it again.
func TestFixtureWatchdogHoldWithdrawn(t *testing.T) {
	f, nf := watchdogIncident(t)
	held := f.clock.Now()
	f.report("node-2", true, nf.Name)
	f.report("node-3", true, nf.Name)
	f.clock.Set(held.Add(5 * time.Second))
	f.report("node-3", true)
	f.clock.Set(held.Add(20 * time.Second))
	f.sync("node-1")
	if a := f.attempt("node-1"); a.State != v1alpha1.AttemptVerifying {
		t.Fatalf("attempt %+v at V + isolation + 2T with one holder of three left, want still verifying", a)
	}
	again := held.Add(30 * time.Second)
	f.clock.Set(again)
	f.report("node-3", true, nf.Name)
	f.verifiedAt(again.Add(20 * time.Second))
}

// TestFixtureWatchdogEmulated: a node whose agent feeds an emulated watchdog is not
// eligible unless the configuration says the cluster is a test (watchdog.allowEmulated).
func TestFixtureWatchdogEmulated(t *testing.T) {
	for name, allow := range map[string]bool{"refused": false, "a test cluster": true} {
		t.Run(name, func(t *testing.T) {
			cfg := watchdogConfig()
			cfg.Watchdog.AllowEmulated = allow
			f := newFixture(t, cfg, threeNodes()...)
			for _, n := range []string{"node-1", "node-2", "node-3"} {
				f.reportOf(n, nodeagent.WatchdogReport{Kind: watchdog.KindEmulated, Armed: true})
			}
			f.clock.Set(f0.Add(time.Minute))
			f.renewAllBut("node-1")
			f.sync("node-1")
			nf := f.incident("node-1")
			refused := nf.Status.Phase == v1alpha1.PhaseFailed && strings.Contains(nf.Status.Message, "emulated watchdog, which resets no machine")
			if refused == allow {
				t.Errorf("allowEmulated %t: phase %s message %q", allow, nf.Status.Phase, nf.Status.Message)
			}
		})
	}
}
