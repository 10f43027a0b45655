package controller

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/nodeagent"
)

var heartbeatKey = []byte("0123456789abcdef")

// heartbeatFixture is the fixture with heartbeats on and a seat taken on loopback; the
// nodes' Leases are renewed every 2s until f0+8s (a measured cadence, so a heartbeat
// floor of 3s); node-1's agent is a member, and its kubelet is at kubelet (host:port).
// change, when given, changes the heartbeats' configuration.
func heartbeatFixture(t *testing.T, kubelet string, change ...func(*v1alpha1.Heartbeats)) (*fixture, *nodeagent.Peers) {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, heartbeatKey, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fixtureConfig()
	cfg.Heartbeats = &v1alpha1.Heartbeats{KeyFile: key, BindAddress: "127.0.0.1:0"}
	for _, c := range change {
		c(cfg.Heartbeats)
	}
	cfg.Default()
	cfg.Heartbeats.ProbeInterval.Duration = 100 * time.Millisecond
	nodes := threeNodes()
	host, port, _ := net.SplitHostPort(kubelet)
	p, _ := strconv.Atoi(port)
	n1 := nodes[0].(*corev1.Node)
	n1.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host}}
	n1.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(p)
	f := newFixture(t, cfg, nodes...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := f.agents().Start(ctx); err != nil {
		t.Fatal(err)
	}
	agent, err := nodeagent.StartPeers(nodeagent.PeerConfig{Node: "node-1", BindAddr: "127.0.0.1", Key: heartbeatKey,
		ProbeInterval: 100 * time.Millisecond}, func() ([]nodeagent.Entry, bool) { return nil, true }, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Stop)
	f.agents().Seat().Join(map[string]string{"node-1": agent.Addr()})
	pollUntil(t, "node-1's agent a member", func() bool { return f.agents().Seat().Members() == 1 })
	for range 4 {
		f.now = f.now.Add(2 * time.Second)
		f.renewAllBut()
	}
	// The API server holds the renewals too, for the live read before an incident opens.
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		if _, err := f.kube.CoordinationV1().Leases(NodeLeaseNamespace).Update(ctx, fixtureLease(n, f.now), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.kube.ClearActions()
	return f, agent
}

// kubeletProbes is kubefence_kubelet_probes_total of node and result in the loop's registry.
func (f *fixture) kubeletProbes(node, result string) float64 {
	f.t.Helper()
	mfs, err := f.c.metrics.Registry.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kubefence_kubelet_probes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["node"] == node && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("%s: not within 30s", what)
	}
}

// silentKubelet is an address where nothing answers: a port just closed.
func silentKubelet(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// answeringKubelet is a kubelet's port that answers every request (401, as a kubelet
// does without credentials).
func answeringKubelet(t *testing.T) *httptest.Server {
	kubelet := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(kubelet.Close)
	return kubelet
}

// heardKubelet waits until the replica's routine check of node-1's kubelet got an answer.
func heardKubelet(t *testing.T, f *fixture) {
	pollUntil(t, "the routine check of node-1's kubelet answered", func() bool { return !f.c.detector.KubeletAnswered("node-1").IsZero() })
}

// crashAgent stops node-1's agent without a goodbye and waits until the seat counts it gone.
func crashAgent(t *testing.T, f *fixture, agent *nodeagent.Peers) {
	agent.Crash()
	pollUntil(t, "node-1's agent gone", func() bool { _, gone := f.agents().Seat().Gone("node-1"); return gone })
}

// A node whose agent is gone and whose kubelet, heard before, does not answer is fenced
// once its Lease has been silent for the heartbeat floor (3s here), long before the
// Lease threshold (30s), and not before.
func TestHeartbeatVerdict(t *testing.T) {
	kubelet := answeringKubelet(t)
	f, agent := heartbeatFixture(t, kubelet.Listener.Addr().String())
	heardKubelet(t, f)
	kubelet.Close()
	last := f.now
	crashAgent(t, f, agent)
	f.now = last.Add(2900 * time.Millisecond)
	f.renewAllBut("node-1")
	f.sync("node-1")
	if nfs := f.incidents("node-1"); len(nfs) > 0 {
		t.Fatalf("incident after 2.9s of silence, below the 3s heartbeat floor: %s", nfs[0].Spec.Reason)
	}
	f.now = last.Add(3100 * time.Millisecond)
	f.sync("node-1")
	nf := f.incident("node-1")
	if !strings.Contains(nf.Spec.Reason, "agent gone from its peers") {
		t.Errorf("reason %q, want the heartbeat evidence", nf.Spec.Reason)
	}
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
}

// An agent gone with its kubelet answering is no verdict: the agent may have been stopped.
func TestHeartbeatKubeletAnswers(t *testing.T) {
	kubelet := answeringKubelet(t)
	f, agent := heartbeatFixture(t, kubelet.Listener.Addr().String())
	last := f.now
	crashAgent(t, f, agent)
	for _, at := range []time.Duration{3100 * time.Millisecond, 6 * time.Second, 9 * time.Second} {
		f.now = last.Add(at)
		f.renewAllBut("node-1")
		f.sync("node-1")
		if nfs := f.incidents("node-1"); len(nfs) > 0 {
			t.Fatalf("incident at +%s with the kubelet answering: %s", at, nfs[0].Spec.Reason)
		}
	}
	f.expectCalls()
}

// An agent still a member is no verdict, whatever the kubelet does.
func TestHeartbeatAgentPresent(t *testing.T) {
	f, _ := heartbeatFixture(t, silentKubelet(t))
	last := f.now
	f.now = last.Add(9 * time.Second)
	f.renewAllBut("node-1")
	f.sync("node-1")
	if nfs := f.incidents("node-1"); len(nfs) > 0 {
		t.Fatalf("incident at +9s with the agent a member: %s", nfs[0].Spec.Reason)
	}
	f.expectCalls()
}

// TestHeartbeatKubeletNeverHeard: a kubelet whose port never answered this replica (a
// firewall, a NetworkPolicy) gives no heartbeat evidence: with its agent gone and its
// Lease silent three heartbeat floors, the node is left to the Lease threshold; and the
// probes show in the metric, per node, as silent.
func TestHeartbeatKubeletNeverHeard(t *testing.T) {
	f, agent := heartbeatFixture(t, silentKubelet(t))
	pollUntil(t, "the routine check of node-1's kubelet", func() bool {
		return f.kubeletProbes("node-1", "silent") > 0
	})
	last := f.now
	crashAgent(t, f, agent)
	for _, at := range []time.Duration{3100 * time.Millisecond, 6 * time.Second, 9 * time.Second} {
		f.now = last.Add(at)
		f.renewAllBut("node-1")
		f.sync("node-1")
		if nfs := f.incidents("node-1"); len(nfs) > 0 {
			t.Fatalf("incident at +%s for a kubelet never heard: %s", at, nfs[0].Spec.Reason)
		}
	}
	f.expectCalls()
	if n := f.kubeletProbes("node-1", "answered"); n != 0 {
		t.Errorf("kubefence_kubelet_probes_total{node=node-1,result=answered} = %v, want 0", n)
	}
}

// TestHeartbeatGoodbyeIsNotGone: an agent that leaves its peers with a goodbye (a
// rollout's SIGTERM) is not gone for heartbeats.leaveGrace (5s here): a kubelet silent
// meanwhile and a Lease silent past the heartbeat floor open nothing; once the grace is
// over the agent is gone, and the node is fenced on heartbeats.
func TestHeartbeatGoodbyeIsNotGone(t *testing.T) {
	kubelet := answeringKubelet(t)
	f, agent := heartbeatFixture(t, kubelet.Listener.Addr().String(), func(h *v1alpha1.Heartbeats) {
		h.LeaveGrace = metav1.Duration{Duration: 5 * time.Second}
	})
	heardKubelet(t, f)
	kubelet.Close()
	last := f.now
	agent.Stop()
	pollUntil(t, "the seat hearing node-1's goodbye", func() bool { return !f.agents().Seat().Left("node-1").IsZero() })
	for _, at := range []time.Duration{3100 * time.Millisecond, 4900 * time.Millisecond} {
		f.now = last.Add(at)
		f.renewAllBut("node-1")
		f.sync("node-1")
		if nfs := f.incidents("node-1"); len(nfs) > 0 {
			t.Fatalf("incident at +%s, within the grace of the agent's goodbye: %s", at, nfs[0].Spec.Reason)
		}
	}
	f.now = last.Add(5100 * time.Millisecond)
	f.renewAllBut("node-1")
	f.sync("node-1")
	if nf := f.incident("node-1"); !strings.Contains(nf.Spec.Reason, "agent gone from its peers") {
		t.Errorf("reason %q once the grace is over, want the heartbeat evidence", nf.Spec.Reason)
	}
}
