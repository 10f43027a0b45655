package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	shared "github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/nodeagent"
)

// The incident loop's use of the watch on the node agents' heartbeats: a node's sync tells
// the detector whether its agent is gone, has the watch probe its kubelet when the
// detector asks, and fences on the verdict. When the watch and the detector give a
// verdict, and when not, is tested in pkg/nodeagentwatch (seat_test.go).

// pollUntil and answeringKubelet are the shared fixture's.
var (
	pollUntil        = shared.PollUntil
	answeringKubelet = shared.AnsweringKubelet
)

// heartbeatFixture is the fixture with heartbeats on and a seat taken on loopback; the
// nodes' Leases are renewed every 2s until f0+8s (a measured cadence, so a heartbeat
// floor of 3s); node-1's agent is a member, and its kubelet is at kubelet (host:port).
func heartbeatFixture(t *testing.T, kubelet string) (*fixture, *nodeagent.Peers) {
	cfg := fixtureConfig()
	cfg.Heartbeats = shared.Heartbeats(t)
	cfg.Default()
	cfg.Heartbeats.ProbeInterval.Duration = 100 * time.Millisecond
	nodes := threeNodes()
	shared.WithKubelet(t, nodes[0].(*corev1.Node), kubelet)
	f := newFixture(t, cfg, nodes...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := f.agents().Start(ctx); err != nil {
		t.Fatal(err)
	}
	agent, err := nodeagent.StartPeers(nodeagent.PeerConfig{Node: "node-1", BindAddr: "127.0.0.1", Key: shared.HeartbeatKey,
		ProbeInterval: 100 * time.Millisecond}, func() ([]nodeagent.Entry, bool) { return nil, true }, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Stop)
	f.agents().Seat().Join(map[string]string{"node-1": agent.Addr()})
	pollUntil(t, "node-1's agent a member", func() bool { return f.agents().Seat().Members() == 1 })
	for range 4 {
		f.clock.Step(2 * time.Second)
		f.renewAllBut()
	}
	// The API server holds the renewals too, for the live read before an incident opens.
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		if _, err := f.kube.CoordinationV1().Leases(NodeLeaseNamespace).Update(ctx, fixtureLease(n, f.clock.Now()), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.kube.ClearActions()
	return f, agent
}

// heardKubelet waits until the replica's routine check of node-1's kubelet got an answer.
func heardKubelet(t *testing.T, f *fixture) {
	pollUntil(t, "the routine check of node-1's kubelet answered", func() bool { return !f.c.detector.KubeletAnswered("node-1").IsZero() })
}

// TestHeartbeatVerdict: a node whose agent is gone and whose kubelet, heard before, does
// not answer is fenced once its Lease has been silent for the heartbeat floor (3s here),
// long before the Lease threshold (30s), and not before; the incident names the
// heartbeat evidence.
func TestHeartbeatVerdict(t *testing.T) {
	kubelet := answeringKubelet(t)
	f, agent := heartbeatFixture(t, kubelet.Listener.Addr().String())
	heardKubelet(t, f)
	kubelet.Close()
	last := f.clock.Now()
	agent.Crash()
	pollUntil(t, "node-1's agent gone", func() bool { _, gone := f.agents().Seat().Gone("node-1"); return gone })
	f.clock.Set(last.Add(2900 * time.Millisecond))
	f.renewAllBut("node-1")
	f.sync("node-1")
	if nfs := f.incidents("node-1"); len(nfs) > 0 {
		t.Fatalf("incident after 2.9s of silence, below the 3s heartbeat floor: %s", nfs[0].Spec.Reason)
	}
	f.clock.Set(last.Add(3100 * time.Millisecond))
	f.sync("node-1")
	nf := f.incident("node-1")
	if !strings.Contains(nf.Spec.Reason, "agent gone from its peers") {
		t.Errorf("reason %q, want the heartbeat evidence", nf.Spec.Reason)
	}
	if nf.Status.Phase != v1alpha1.PhaseRemediated {
		t.Errorf("phase %s, want Remediated (%s)", nf.Status.Phase, nf.Status.Message)
	}
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
}
