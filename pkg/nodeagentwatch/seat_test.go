package nodeagentwatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/caches"
	"github.com/kubefence/kubefence/pkg/detector"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/nodeagent"
)

// seatHarness is a watch with heartbeats on and its seat taken on loopback, over
// node-1..3 whose Leases the detector saw renewed every 2s until fixture.T0 plus 8s (a
// measured cadence, so a heartbeat floor of 3s); node-1's agent is a member, and its
// kubelet listens at the address given. The incident loop's part is played by verdict.
type seatHarness struct {
	t     *testing.T
	clock *fixture.Clock
	det   *detector.Detector
	reg   *prometheus.Registry
	nodes cache.Indexer
	w     *Watch
	agent *nodeagent.Peers
}

// parts are a watch and what it was made of: fake API servers, the caches over them, the
// detector it feeds and the registry of its metrics.
type parts struct {
	w       *Watch
	kube    *fake.Clientset
	fencing *fencingfake.Clientset
	set     *caches.Set
	det     *detector.Detector
	reg     *prometheus.Registry
}

// newWatch is a watch on cfg over fresh caches of empty fake API servers, at clk.
func newWatch(t *testing.T, cfg *v1alpha1.Config, clk *fixture.Clock, enqueue func(string)) parts {
	t.Helper()
	p := parts{kube: fixture.Cluster(0), fencing: fencingfake.NewSimpleClientset(), det: detector.ForConfig(cfg), reg: prometheus.NewRegistry()}
	var err error
	p.set, err = caches.New(p.kube, p.fencing, nil, cfg.LeaderElection.Namespace, cfg.Watchdog.Namespace, "kubefence-pause")
	fixture.Must(t, err)
	p.w, err = New(Options{Config: cfg, Caches: p.set, Detector: p.det, Incidents: incidentsOf{}, Queue: enqueueFunc(enqueue), Now: clk.Now, Identity: "me", Registry: p.reg})
	fixture.Must(t, err)
	return p
}

func newSeatHarness(t *testing.T, kubelet string, change ...func(*v1alpha1.Heartbeats)) *seatHarness {
	t.Helper()
	cfg := &v1alpha1.Config{Heartbeats: fixture.Heartbeats(t)}
	for _, c := range change {
		c(cfg.Heartbeats)
	}
	cfg.Default()
	cfg.Heartbeats.ProbeInterval.Duration = 100 * time.Millisecond
	h := &seatHarness{t: t, clock: fixture.NewClock(fixture.T0)}
	p := newWatch(t, cfg, h.clock, func(string) {})
	h.w, h.det, h.reg = p.w, p.det, p.reg
	h.nodes = p.set.Kube.Core().V1().Nodes().Informer().GetIndexer()
	for i, obj := range fixture.Nodes(3, fixture.T0) {
		switch o := obj.(type) {
		case *corev1.Node:
			if i == 0 {
				fixture.WithKubelet(t, o, kubelet)
			}
			fixture.Must(t, h.nodes.Add(o))
		default:
			h.det.ObserveLease(fixture.Lease(obj.(metav1.Object).GetName(), fixture.T0), fixture.T0)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	fixture.Must(t, h.w.Start(ctx))
	agent, err := nodeagent.StartPeers(nodeagent.PeerConfig{Node: "node-1", BindAddr: "127.0.0.1", Key: fixture.HeartbeatKey,
		ProbeInterval: 100 * time.Millisecond}, func() ([]nodeagent.Entry, bool) { return nil, true }, clock.RealClock{})
	fixture.Must(t, err)
	t.Cleanup(agent.Stop)
	h.agent = agent
	h.w.Seat().Join(map[string]string{"node-1": agent.Addr()})
	fixture.PollUntil(t, "node-1's agent a member", func() bool { return h.w.Seat().Members() == 1 })
	for range 4 {
		h.renewAllBut(h.clock.Step(2 * time.Second))
	}
	return h
}

// renewAllBut has the detector see every node's Lease but those of dead renewed at at.
func (h *seatHarness) renewAllBut(at time.Time, dead ...string) {
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		if !strings.Contains(strings.Join(dead, ","), n) {
			h.det.ObserveLease(fixture.Lease(n, at), at)
		}
	}
}

// verdict is node-1's health at the clock as the incident loop's sync finds it: the
// watch tells the detector whether the agent is gone, and probes the kubelet when the
// detector asks.
func (h *seatHarness) verdict() detector.Observation {
	h.t.Helper()
	obj, ok, err := h.nodes.GetByKey("node-1")
	if err != nil || !ok {
		h.t.Fatalf("node-1 not cached: %v", err)
	}
	n, now := obj.(*corev1.Node), h.clock.Now()
	h.w.ObserveAgent(n.Name)
	obs := h.det.Assess(n, now)
	if obs.ProbeKubelet && h.w.ProbeKubelet(context.Background(), n, now) {
		obs = h.det.Assess(n, now)
	}
	return obs
}

// expectAliveAt checks that node-1, its Lease silent since last, is not unhealthy at
// each of the times after last.
func (h *seatHarness) expectAliveAt(last time.Time, why string, after ...time.Duration) {
	h.t.Helper()
	for _, d := range after {
		h.clock.Set(last.Add(d))
		h.renewAllBut(h.clock.Now(), "node-1")
		if obs := h.verdict(); obs.Health == detector.Unhealthy {
			h.t.Fatalf("unhealthy at +%s %s: %s", d, why, obs.Evidence)
		}
	}
}

// expectHeartbeatVerdict checks that node-1 is unhealthy at last plus d, on the
// heartbeat evidence.
func (h *seatHarness) expectHeartbeatVerdict(last time.Time, d time.Duration) {
	h.t.Helper()
	h.clock.Set(last.Add(d))
	h.renewAllBut(h.clock.Now(), "node-1")
	if obs := h.verdict(); obs.Health != detector.Unhealthy || !strings.Contains(obs.Evidence, "agent gone from its peers") {
		h.t.Errorf("at +%s: %s (%s), want unhealthy on the heartbeat evidence", d, obs.Health, obs.Evidence)
	}
}

// heardKubelet waits until the seat's routine check of node-1's kubelet got an answer.
func (h *seatHarness) heardKubelet() {
	h.t.Helper()
	fixture.PollUntil(h.t, "the routine check of node-1's kubelet answered", func() bool { return !h.det.KubeletAnswered("node-1").IsZero() })
}

// crashAgent stops node-1's agent without a goodbye and waits until the seat counts it
// gone.
func (h *seatHarness) crashAgent() {
	h.t.Helper()
	h.agent.Crash()
	fixture.PollUntil(h.t, "node-1's agent gone", func() bool { _, gone := h.w.Seat().Gone("node-1"); return gone })
}

// probes is kubefence_kubelet_probes_total of node-1 and result.
func (h *seatHarness) probes(result string) float64 {
	h.t.Helper()
	return counterOf(h.t, h.reg, "kubefence_kubelet_probes_total", map[string]string{"node": "node-1", "result": result})
}

// A node whose agent is gone and whose kubelet, heard before, does not answer is
// unhealthy once its Lease has been silent for the heartbeat floor (3s here), long
// before the Lease threshold (30s), and not before.
func TestHeartbeatVerdict(t *testing.T) {
	kubelet := fixture.AnsweringKubelet(t)
	h := newSeatHarness(t, kubelet.Listener.Addr().String())
	h.heardKubelet()
	kubelet.Close()
	last := h.clock.Now()
	h.crashAgent()
	h.expectAliveAt(last, "below the 3s heartbeat floor", 2900*time.Millisecond)
	h.expectHeartbeatVerdict(last, 3100*time.Millisecond)
	if n := h.probes(probeSilent); n == 0 {
		t.Error("no silent probe of node-1's kubelet counted")
	}
}

// An agent gone with its kubelet answering is no verdict: the agent may have been stopped.
func TestHeartbeatKubeletAnswers(t *testing.T) {
	kubelet := fixture.AnsweringKubelet(t)
	h := newSeatHarness(t, kubelet.Listener.Addr().String())
	last := h.clock.Now()
	h.crashAgent()
	h.expectAliveAt(last, "with the kubelet answering", 3100*time.Millisecond, 6*time.Second, 9*time.Second)
}

// An agent still a member is no verdict, whatever the kubelet does.
func TestHeartbeatAgentPresent(t *testing.T) {
	h := newSeatHarness(t, fixture.SilentKubelet(t))
	h.expectAliveAt(h.clock.Now(), "with the agent a member", 9*time.Second)
}

// TestHeartbeatKubeletNeverHeard: a kubelet whose port never answered this replica (a
// firewall, a NetworkPolicy) gives no heartbeat evidence: with its agent gone and its
// Lease silent three heartbeat floors, the node is left to the Lease threshold; and the
// probes show in the metric, per node, as silent.
func TestHeartbeatKubeletNeverHeard(t *testing.T) {
	h := newSeatHarness(t, fixture.SilentKubelet(t))
	fixture.PollUntil(t, "the routine check of node-1's kubelet", func() bool { return h.probes(probeSilent) > 0 })
	last := h.clock.Now()
	h.crashAgent()
	h.expectAliveAt(last, "for a kubelet never heard", 3100*time.Millisecond, 6*time.Second, 9*time.Second)
	if n := h.probes(probeAnswered); n != 0 {
		t.Errorf("kubefence_kubelet_probes_total{node=node-1,result=answered} = %v, want 0", n)
	}
}

// TestHeartbeatGoodbyeIsNotGone: an agent that leaves its peers with a goodbye (a
// rollout's SIGTERM) is not gone for heartbeats.leaveGrace (5s here): a kubelet silent
// meanwhile and a Lease silent past the heartbeat floor give no verdict; once the grace
// is over the agent is gone, and the node is unhealthy on heartbeats.
func TestHeartbeatGoodbyeIsNotGone(t *testing.T) {
	kubelet := fixture.AnsweringKubelet(t)
	h := newSeatHarness(t, kubelet.Listener.Addr().String(), func(hb *v1alpha1.Heartbeats) {
		hb.LeaveGrace = metav1.Duration{Duration: 5 * time.Second}
	})
	h.heardKubelet()
	kubelet.Close()
	last := h.clock.Now()
	h.agent.Stop()
	fixture.PollUntil(t, "the seat hearing node-1's goodbye", func() bool { return !h.w.Seat().Left("node-1").IsZero() })
	h.expectAliveAt(last, "within the grace of the agent's goodbye", 3100*time.Millisecond, 4900*time.Millisecond)
	h.expectHeartbeatVerdict(last, 5100*time.Millisecond)
	if left := h.w.agentLeft("node-1"); left.IsZero() {
		t.Error("the goodbye is not kept for the watchdog verdict")
	}
}

// enqueueFunc is a Queue that calls itself.
type enqueueFunc func(node string)

func (f enqueueFunc) Add(node string) { f(node) }
