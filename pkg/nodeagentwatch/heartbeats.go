package nodeagentwatch

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/nodeagent"
)

// Results of kubefence_kubelet_probes_total.
const (
	probeAnswered = "answered"
	probeSilent   = "silent"
)

// heartbeats is this replica's seat among the node agents' peers (config heartbeats): it
// joins the agents their reports name, tells the detector which agents are gone, probes
// the kubelets the detector asks about, and every kubelet now and then
// (heartbeats.kubeletCheckInterval), so that a kubelet's silence counts only from one this
// replica has heard. Standbys keep a seat and check the kubelets too, so that a new
// leader knows at once which agents are gone and which kubelets answer.
type heartbeats struct {
	cfg *v1alpha1.Heartbeats
	// recheck is how long after an unanswered routine check a kubelet is asked again
	// (recheckAfter).
	recheck  time.Duration
	seat     *nodeagent.Observer
	kubelet  *http.Client
	members  prometheus.Gauge
	measured prometheus.Gauge
	probes   *prometheus.CounterVec
}

func newHeartbeats(cfg *v1alpha1.Heartbeats, reg prometheus.Registerer) *heartbeats {
	h := &heartbeats{cfg: cfg, recheck: recheckAfter(cfg),
		// Any HTTP answer shows the kubelet alive; nothing in it is read or trusted. One
		// who could impersonate a kubelet could only keep its node from a heartbeat
		// verdict, leaving it to the Lease threshold: no certificate is needed to be safe.
		kubelet: &http.Client{Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
			DisableKeepAlives: true, Proxy: nil,
		}},
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubefence_heartbeat_agents",
			Help: "Node agents that are members of this replica's seat among their peers (config heartbeats).",
		}),
		measured: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubefence_heartbeat_measured_nodes",
			Help: "Nodes whose Lease renewal cadence this replica has measured: heartbeat evidence acts only on them (config heartbeats).",
		}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubefence_kubelet_probes_total",
			Help: "Probes of each node's kubelet by this replica, by result (answered, silent): the routine checks and those of nodes whose agent is gone. A kubelet that never answers gives no heartbeat evidence.",
		}, []string{"node", "result"}),
	}
	reg.MustRegister(h.members, h.measured, h.probes)
	return h
}

// startHeartbeats takes the seat, and joins the reporting agents every few seconds until
// ctx ends.
func (w *Watch) startHeartbeats(ctx context.Context) error {
	h := w.heartbeats
	key, err := os.ReadFile(h.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("heartbeats.keyFile: %w", err)
	}
	pc := nodeagent.PeerConfig{Key: key, ProbeInterval: h.cfg.ProbeInterval.Duration}
	if pc.BindAddr, pc.BindPort, err = nodeagent.SplitAddress(h.cfg.BindAddress); err != nil {
		return fmt.Errorf("heartbeats.bindAddress: %w", err)
	}
	advertise := h.cfg.AdvertiseAddress
	if ip := net.ParseIP(pc.BindAddr); advertise == "" && ip != nil && ip.IsUnspecified() && os.Getenv("POD_IP") != "" {
		advertise = net.JoinHostPort(os.Getenv("POD_IP"), strconv.Itoa(pc.BindPort))
	}
	if advertise != "" {
		if pc.AdvertiseAddr, pc.AdvertisePort, err = nodeagent.SplitAddress(advertise); err != nil {
			return fmt.Errorf("heartbeats.advertiseAddress: %w", err)
		}
	}
	h.seat, err = nodeagent.StartObserver(pc, w.identity, h.cfg.LeaveGrace.Duration, w.queue.Add, w.now)
	if err != nil {
		return fmt.Errorf("heartbeats: %w", err)
	}
	klog.FromContext(ctx).Info("Seated among the node agents' peers", "address", h.seat.Addr())
	go w.checkKubelets(ctx)
	go func() {
		wait.UntilWithContext(ctx, func(context.Context) {
			h.seat.Join(w.watchdogs.peers())
			h.members.Set(float64(h.seat.Members()))
			h.measured.Set(float64(w.detector.Measured()))
		}, 2*time.Second)
		h.seat.Stop()
	}()
	return nil
}

// ObserveAgent passes to the detector whether node's agent is gone.
func (w *Watch) ObserveAgent(node string) {
	if w.heartbeats == nil || w.heartbeats.seat == nil {
		return
	}
	at, gone := w.heartbeats.seat.Gone(node)
	w.detector.ObserveAgent(node, at, gone)
}

// agentLeft is when this replica's seat last saw node's agent leave its peers with a
// goodbye; zero without heartbeats.
func (w *Watch) agentLeft(node string) time.Time {
	if w.heartbeats == nil || w.heartbeats.seat == nil {
		return time.Time{}
	}
	return w.heartbeats.seat.Left(node)
}

// ProbeKubelet asks node's kubelet for an answer, on every InternalIP at once, and
// records whether any came within heartbeats.kubeletTimeout. A node with no address
// gives no evidence, and so no verdict. It reports whether heartbeats are on: without
// them nothing is probed.
func (w *Watch) ProbeKubelet(ctx context.Context, node *corev1.Node, now time.Time) bool {
	if w.heartbeats == nil {
		return false
	}
	answered, probed := w.heartbeats.probe(ctx, node)
	klog.FromContext(ctx).V(2).Info("Probed the kubelet of a node whose agent is gone", "answered", answered)
	w.detector.ObserveKubeletProbe(node.Name, now, answered || !probed)
	return true
}

// checkKubelets probes every node's kubelet once per heartbeats.kubeletCheckInterval,
// at most kubeletChecksAtOnce at a time, until ctx ends: the first round at once (until
// a kubelet has answered, its silence counts for nothing), the next ones spread over the
// interval.
func (w *Watch) checkKubelets(ctx context.Context) {
	h := w.heartbeats
	every := h.cfg.KubeletCheckInterval.Duration
	slots := make(chan struct{}, kubeletChecksAtOnce)
	checked := map[string]bool{}
	for round := 0; ctx.Err() == nil; round++ {
		nodes, err := w.nodes.List(labels.Everything())
		if err != nil {
			nodes = nil
		}
		gap := every / time.Duration(max(len(nodes), 1))
		if round == 0 {
			gap = 0
		}
		now := map[string]bool{}
		for _, n := range nodes {
			now[n.Name] = true
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			go w.checkKubelet(ctx, n, slots)
			if !pause(ctx, gap) {
				return
			}
		}
		for name := range checked {
			if !now[name] {
				h.probes.DeleteLabelValues(name, probeAnswered)
				h.probes.DeleteLabelValues(name, probeSilent)
			}
		}
		checked = now
		if (round == 0 || len(nodes) == 0) && !pause(ctx, every) {
			return
		}
	}
}

// kubeletChecksAtOnce bounds the routine probes in flight.
const kubeletChecksAtOnce = 32

// checkKubelet is one routine check of node's kubelet. An unanswered probe is asked
// again h.recheck later, and only the second probe's result counts: a kubelet silent
// while its agent is among its peers stops its silence from counting as a sign of death
// (detector.ObserveKubeletCheck), and one probe alone could be silent because the
// kubelet or this replica was slow for a moment, or because the node has just died and
// its peers have not declared its agent gone yet. Either way that node would lose its
// heartbeat evidence until a later check, up to kubeletCheckInterval, and be judged on
// its Lease alone. By the second probe a dead node's agent is gone, and its silence is
// kept as evidence.
//
// The floor: a kubelet that stops answering while its agent is present (a firewall, a
// NetworkPolicy) has its silence discounted at most h.recheck plus two kubeletTimeouts
// after the first unanswered check, and never counts as evidence without its agent gone
// and its Lease silent for the heartbeat floor (detector.HeartbeatFloor).
//
// It is called holding one of slots, the bound on probes in flight, and gives it back
// while it waits to ask again: kubelets that never answer (a NetworkPolicy in the way of
// them all) must not hold the slots through the wait and hold up the others' checks.
func (w *Watch) checkKubelet(ctx context.Context, n *corev1.Node, slots chan struct{}) {
	h := w.heartbeats
	started := w.now()
	answered, probed := h.probe(ctx, n)
	<-slots
	if probed && !answered {
		if !pause(ctx, h.recheck) {
			return
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		started = w.now()
		answered, probed = h.probe(ctx, n)
		<-slots
	}
	if !probed || ctx.Err() != nil {
		return
	}
	if w.detector.ObserveKubeletCheck(n.Name, started, answered) {
		klog.FromContext(ctx).Info("A kubelet did not answer two probes while its node's agent was among its peers: its silence will not count as a sign of the node's death until it answers again (heartbeats.kubeletTimeout, or a firewall or NetworkPolicy in the way)",
			"node", n.Name, "kubeletTimeout", h.cfg.KubeletTimeout.Duration, "apart", h.recheck)
	}
}

// recheckAfter is how long after an unanswered routine check of a kubelet it is asked
// again: at least detector.KubeletReprobe, and long enough for the agents' peers to
// declare a dead member's agent gone: memberlist probes each member in turn, then
// suspects it for 4 to 24 probe intervals among fewer than ten members (its suspicion
// multiplier and maximum timeout multiplier), so 30 intervals cover a small group.
func recheckAfter(cfg *v1alpha1.Heartbeats) time.Duration {
	return max(detector.KubeletReprobe, 30*cfg.ProbeInterval.Duration)
}

// pause waits d, or until ctx ends, and says whether ctx is still live: the pacing of a
// background loop, not a wait for a condition.
func pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// probe asks node's kubelet for an answer on every InternalIP at once, and counts the
// result; probed is false for a node with no address.
func (h *heartbeats) probe(ctx context.Context, node *corev1.Node) (answered, probed bool) {
	port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	if port == 0 {
		port = 10250
	}
	var addrs []string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			addrs = append(addrs, net.JoinHostPort(a.Address, strconv.Itoa(int(port))))
		}
	}
	if len(addrs) == 0 {
		return false, false
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.KubeletTimeout.Duration)
	defer cancel()
	results := make(chan error, len(addrs))
	for _, addr := range addrs {
		go func() { results <- h.get(ctx, addr) }()
	}
	for range addrs {
		if err := <-results; err == nil {
			answered = true
			cancel()
		}
	}
	result := probeSilent
	if answered {
		result = probeAnswered
	}
	h.probes.WithLabelValues(node.Name, result).Inc()
	return answered, true
}

// get returns nil once addr answers an HTTPS request with any status.
func (h *heartbeats) get(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := h.kubelet.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	return nil
}
