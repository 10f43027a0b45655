package nodeagent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kubefence/kubefence/pkg/watchdog"
)

// Metrics returns the agent's metrics, read from its state at each scrape.
func (a *Agent) Metrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kubefence_node_agent_" + name, Help: help}, f))
	}
	boolean := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	watchdog := func() (st watchdog.State) {
		if f, _ := a.started(); f != nil {
			st = f.State()
		}
		return st
	}
	gauge("watchdog_armed", "1 while the node's watchdog is armed.", func() float64 { return boolean(watchdog().Armed) })
	gauge("watchdog_counting", "1 while a watchdog device whose arming failed counts down anyway (nowayout): the agent feeds it while the node may live, and the controller does not count on it.", func() float64 {
		return boolean(watchdog().Counting)
	})
	gauge("watchdog_feeding", "1 while the agent feeds the armed watchdog; 0 once it stopped for good (the node resets within the timeout) or before it is armed.", func() float64 {
		st := watchdog()
		return boolean(st.Armed && st.Stopped == "")
	})
	gauge("last_read_timestamp_seconds", "When the agent's last successful read of the NodeFences began (Unix time); 0 before the first.", func() float64 {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.known.apiRead.IsZero() {
			return 0
		}
		return float64(a.known.apiRead.UnixNano()) / 1e9
	})
	gauge("read_failing", "1 while the agent's latest read of the NodeFences failed.", func() float64 {
		a.mu.Lock()
		defer a.mu.Unlock()
		return boolean(a.known.readErr != "")
	})
	gauge("holds", "How many NodeFences past their budget the agent's own reads hold.", func() float64 {
		a.mu.Lock()
		defer a.mu.Unlock()
		return float64(len(a.known.holds))
	})
	a.peerGauges(gauge)
	counter := func(name, help string, f func(*Peers) uint64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kubefence_node_agent_" + name, Help: help}, func() float64 {
			if _, peers := a.started(); peers != nil {
				return float64(f(peers))
			}
			return 0
		}))
	}
	counter("peer_questions_total", "Questions this agent sent its peers for answers outside the probes' turn, while its own read of the NodeFences was older than half of isolation.",
		func(p *Peers) uint64 { return p.questions.Load() })
	counter("peer_questions_answered_total", "Questions from peers this agent answered.", func(p *Peers) uint64 { return p.answered.Load() })
	return reg
}

// peerGauges registers, through gauge, what the agent knows of its peers: the answers
// within isolation, the members its read listed, those memberlist counts alive, and the
// NodeFences their answers carried.
func (a *Agent) peerGauges(gauge func(name, help string, f func() float64)) {
	gauge("peers_answering", "How many peers answered a probe sent within the isolation limit.", func() float64 {
		_, peers := a.started()
		if peers == nil {
			return 0
		}
		n := 0
		for _, at := range peers.Acks() {
			if a.cfg.Clock.Since(at) <= a.cfg.Timing.Isolation {
				n++
			}
		}
		return float64(n)
	})
	gauge("members", "How many nodes the agent's latest read of the members listed, its own included: the count a majority of peers' answers is taken of.", func() float64 {
		a.mu.Lock()
		defer a.mu.Unlock()
		return float64(len(a.known.members))
	})
	gauge("peers_alive", "How many agents (this one included) and controller seats memberlist counts alive, from its probes and its members' gossip; 0 without peers.", func() float64 {
		if _, peers := a.started(); peers != nil {
			return float64(peers.ml.NumMembers())
		}
		return 0
	})
	gauge("relayed", "How many NodeFences the peers' answers carried that no read of this agent has dropped yet.", func() float64 {
		if _, peers := a.started(); peers != nil {
			return float64(len(peers.Relayed()))
		}
		return 0
	})
}

// started returns the feeder and the peers once Run started them.
func (a *Agent) started() (*watchdog.Feeder, *Peers) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.feeder, a.peers
}
