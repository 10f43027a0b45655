package controller

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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/nodeagent"
)

// Results of kubefence_kubelet_probes_total.
const (
	probeAnswered = "answered"
	probeSilent   = "silent"
)

// heartbeats is this replica's seat among the node agents' peers (config heartbeats): it
// joins the agents their reports name, tells the detector which agents are gone, and
// probes the kubelets the detector asks about. Standbys keep a seat too, so that a new
// leader knows at once which agents are gone.
type heartbeats struct {
	cfg      *v1alpha1.Heartbeats
	seat     *nodeagent.Observer
	kubelet  *http.Client
	members  prometheus.Gauge
	measured prometheus.Gauge
	probes   *prometheus.CounterVec
}

func newHeartbeats(cfg *v1alpha1.Heartbeats, reg prometheus.Registerer) *heartbeats {
	h := &heartbeats{cfg: cfg,
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
			Help: "Probes of the kubelets of nodes whose agent is gone, by result (answered, silent).",
		}, []string{"result"}),
	}
	h.probes.WithLabelValues(probeAnswered)
	h.probes.WithLabelValues(probeSilent)
	reg.MustRegister(h.members, h.measured, h.probes)
	return h
}

// startHeartbeats takes the seat, and joins the reporting agents every few seconds until
// ctx ends.
func (c *Controller) startHeartbeats(ctx context.Context) error {
	h := c.peers.heartbeats
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
	h.seat, err = nodeagent.StartObserver(pc, c.opts.Identity, func(node string) { c.queue.Add(node) }, c.now)
	if err != nil {
		return fmt.Errorf("heartbeats: %w", err)
	}
	klog.FromContext(ctx).Info("Seated among the node agents' peers", "address", h.seat.Addr())
	go func() {
		wait.UntilWithContext(ctx, func(context.Context) {
			h.seat.Join(c.peers.watchdogs.peers())
			h.members.Set(float64(h.seat.Members()))
			h.measured.Set(float64(c.detector.Measured()))
		}, 2*time.Second)
		h.seat.Stop()
	}()
	return nil
}

// observeAgent passes to the detector whether node's agent is gone.
func (c *Controller) observeAgent(node string) {
	if c.peers.heartbeats == nil || c.peers.heartbeats.seat == nil {
		return
	}
	at, gone := c.peers.heartbeats.seat.Gone(node)
	c.detector.ObserveAgent(node, at, gone)
}

// probeKubelet asks node's kubelet for an answer, on every InternalIP at once, and
// records whether any came within heartbeats.kubeletTimeout.
func (c *Controller) probeKubelet(ctx context.Context, node *corev1.Node, now time.Time) {
	h := c.peers.heartbeats
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
	answered := len(addrs) == 0 // no address to probe: no evidence, and so no verdict
	if !answered {
		ctx, cancel := context.WithTimeout(ctx, h.cfg.KubeletTimeout.Duration)
		defer cancel()
		results := make(chan error, len(addrs))
		for _, addr := range addrs {
			go func() { results <- h.get(ctx, addr) }()
		}
		var errs []string
		for range addrs {
			if err := <-results; err != nil {
				errs = append(errs, err.Error())
				continue
			}
			answered = true
			cancel()
		}
		klog.FromContext(ctx).V(2).Info("Probed the kubelet of a node whose agent is gone", "answered", answered, "errors", errs)
	}
	result := probeSilent
	if answered {
		result = probeAnswered
	}
	h.probes.WithLabelValues(result).Inc()
	c.detector.ObserveKubeletProbe(node.Name, now, answered)
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
