package sim

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

// NodeAgentOptions are the node agents' settings in the simulation.
type NodeAgentOptions struct {
	// Bin is the fence-node-agent binary.
	Bin string
	// Isolation, ReadInterval and WatchdogTimeout are the agents' flags.
	Isolation, ReadInterval, WatchdogTimeout time.Duration
	// Unarmed are the nodes whose agent runs without a watchdog.
	Unarmed map[string]bool
	// Peers makes the agents answer each other (--peer-bind-address), through a switch
	// that a partition cuts; PeerProbe is their --peer-probe-interval, zero for the
	// agent's default.
	Peers     bool
	PeerProbe time.Duration
	// Batch starts the agents that many at a time, each batch once the one before has
	// reported, as a DaemonSet rollout with maxUnavailable does; 0 starts them all at
	// once. Two cores do not start 100 agents at once and serve their API server too.
	Batch int
}

// NodeAgents are fence-node-agent processes, one per simulated node, each reaching the
// API server through a link of its own (Cut is the node's network partition) and feeding
// an emulated watchdog that resets its machine (Node.Reset: the agent's process dies, and
// a new one starts on the new boot) when it is not fed in time: what a real watchdog
// does, without touching this machine's. A machine powered off runs no agent and no
// watchdog; powered on, it boots a new agent (watchPower).
type NodeAgents struct {
	h      *Harness
	o      NodeAgentOptions
	agents map[string]*simAgent
	sw     *peerSwitch // nil without peers
	key    string      // the peers' key file
	done   context.CancelFunc

	mu     sync.Mutex
	resets map[string][]time.Time // watchdog resets
	halts  map[string][]time.Time // machines that died by the simulation's hand
}

type simAgent struct {
	node string
	dir  string
	args []string
	proc *process
	emu  *watchdog.Emulator
	link *apiLink
	// Guarded by NodeAgents.mu: halted, a dead machine's watchdog resets nothing; off,
	// the machine was last seen powered off, and emuOff its watchdog closed with it; gone,
	// the agent was stopped for good.
	halted, off, emuOff, gone bool
}

// StartNodeAgents starts an agent on every node of h.
func StartNodeAgents(ctx context.Context, h *Harness, o NodeAgentOptions) (*NodeAgents, error) {
	a := &NodeAgents{h: h, o: o, agents: map[string]*simAgent{}, resets: map[string][]time.Time{}, halts: map[string][]time.Time{}}
	watch, done := context.WithCancel(context.Background())
	a.done = done
	if o.Peers {
		a.sw = newPeerSwitch()
		a.key = filepath.Join(h.dir, "node-agent-peer.key")
		if err := os.WriteFile(a.key, []byte(newBootID()[:32]), 0o600); err != nil {
			return nil, err
		}
	}
	target, err := url.Parse(h.Cluster.Config.Host)
	if err != nil {
		return nil, err
	}
	for i, n := range h.Cluster.Nodes() {
		if err := a.start(n, target.Host); err != nil {
			a.Stop()
			return nil, err
		}
		if o.Batch > 0 && (i+1)%o.Batch == 0 {
			if err := a.WaitReports(ctx, 3*time.Minute); err != nil {
				a.Stop()
				return nil, err
			}
		}
	}
	go a.watchPower(watch)
	return a, nil
}

func (a *NodeAgents) start(n *Node, apiserver string) error {
	dir := filepath.Join(a.h.dir, "node-agent-"+n.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	s := &simAgent{node: n.Name()}
	a.agents[n.Name()] = s
	var err error
	if s.link, err = startLink("127.0.0.1:0", apiserver); err != nil {
		return err
	}
	kubeconfig, err := a.kubeconfig(dir, "https://"+s.link.Addr())
	if err != nil {
		return err
	}
	boot := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(boot, []byte(n.BootID()+"\n"), 0o644); err != nil {
		return err
	}
	args := []string{"--kubeconfig", kubeconfig, "--node-name", n.Name(), "--namespace", ControllerNamespace,
		"--boot-id-file", boot, "--isolation", a.o.Isolation.String(), "--read-interval", a.o.ReadInterval.String(),
		"--report-interval", "10s", "--health-probe-bind-address", "127.0.0.1:0", "--v", "2"}
	if a.sw != nil {
		port, err := freePeerPort()
		if err != nil {
			return err
		}
		relay, err := a.sw.relay(n.Name(), port)
		if err != nil {
			return err
		}
		args = append(args, "--peer-bind-address", fmt.Sprintf("127.0.0.1:%d", port), "--peer-advertise-address", relay, "--peer-key-file", a.key)
		if a.o.PeerProbe > 0 {
			args = append(args, "--peer-probe-interval", a.o.PeerProbe.String())
		}
	}
	if !a.o.Unarmed[n.Name()] {
		s.emu = &watchdog.Emulator{Path: filepath.Join(dir, "watchdog.sock"), Expired: func() { a.reset(n) }}
		if err := s.emu.Start(); err != nil {
			return err
		}
		args = append(args, "--watchdog", "unix:"+s.emu.Path, "--watchdog-timeout", a.o.WatchdogTimeout.String())
	}
	s.dir, s.args = dir, args
	return a.run(s)
}

func (a *NodeAgents) run(s *simAgent) error {
	p, err := startProcess(s.dir, "node-agent-"+s.node, a.o.Bin, s.args)
	if err != nil {
		return err
	}
	a.h.track(p)
	a.mu.Lock()
	s.proc = p
	a.mu.Unlock()
	return nil
}

// Restart ends node's agent, with SIGTERM (a rollout: the agent disarms its watchdog
// if its node may live) or SIGKILL (a crash: the countdown runs on), and starts it again
// at once, as the kubelet restarts a container.
func (a *NodeAgents) Restart(node string, kill bool) error {
	s := a.agents[node]
	a.mu.Lock()
	p := s.proc
	a.mu.Unlock()
	if kill {
		if err := syscall.Kill(-p.pid(), syscall.SIGKILL); err != nil {
			return err
		}
	}
	if err := p.stop(10 * time.Second); err != nil {
		return err
	}
	return a.run(s)
}

// kubeconfig is the harness's admin kubeconfig with server as the API server's address.
func (a *NodeAgents) kubeconfig(dir, server string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(a.h.Cluster.Kubeconfig)
	if err != nil {
		return "", err
	}
	for _, c := range cfg.Clusters {
		c.Server = server
		// The API server's certificate names 127.0.0.1, where the link listens too.
		c.TLSServerName = ""
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// reset is the watchdog firing: the machine resets, and the agent with it (no SIGTERM
// handler runs in a reset); a new agent starts on the new boot.
func (a *NodeAgents) reset(n *Node) {
	a.mu.Lock()
	s := a.agents[n.Name()]
	if s.halted {
		a.mu.Unlock()
		return
	}
	a.resets[n.Name()] = append(a.resets[n.Name()], time.Now())
	p, gone := s.proc, s.gone
	a.mu.Unlock()
	n.Reset()
	kill(p)
	if !gone {
		if err := a.boot(s, n.BootID()); err != nil {
			a.h.Cluster.logf("sim: node %s: start its agent after the reset: %v", n.Name(), err)
		}
	}
}

// Cut partitions node's agent from the API server and its peers: its connections drop
// and new ones are refused.
func (a *NodeAgents) Cut(node string) {
	a.agents[node].link.Cut()
	if a.sw != nil {
		a.sw.Cut(node)
	}
}

// SeatArgs are the flags that put a controller replica's seat among the peers behind a
// relay of the switch (so that CutFromController reaches it); none without peers.
func (a *NodeAgents) SeatArgs(replica string) ([]string, error) {
	if a.sw == nil {
		return nil, nil
	}
	port, err := freePeerPort()
	if err != nil {
		return nil, err
	}
	relay, err := a.sw.relay(nodeagent.ObserverPrefix+replica, port)
	if err != nil {
		return nil, err
	}
	return []string{"--heartbeat-bind-address", fmt.Sprintf("127.0.0.1:%d", port), "--heartbeat-advertise-address", relay}, nil
}

// CutFromController cuts node off from every controller replica: their seats no longer
// hear its agent, nor it theirs, and its kubelet port drops their probes. Its peers and
// the API server still hear it.
func (a *NodeAgents) CutFromController(node string) {
	if a.sw != nil {
		a.sw.CutFromSeats(node)
	}
	a.h.Cluster.Node(node).CutFromController()
}

// Kill SIGKILLs node's agent for good; its machine and kubelet run on.
func (a *NodeAgents) Kill(node string) error {
	a.mu.Lock()
	p := a.agents[node].proc
	a.mu.Unlock()
	if err := syscall.Kill(-p.pid(), syscall.SIGKILL); err != nil {
		return err
	}
	return p.stop(10 * time.Second)
}

// Halt kills node's machine without its BMC's doing: the node stops, its agent dies
// with it (SIGKILL, so the watchdog is not disarmed) and its watchdog has no power left
// to reset anything.
func (a *NodeAgents) Halt(node string) {
	a.mu.Lock()
	s := a.agents[node]
	s.halted = true
	a.mu.Unlock()
	a.h.Cluster.Node(node).Halt()
	// The machine is down from here: a kubelet tick in flight when Halt was called (a Lease
	// renewal the API server accepted) finished first, and was the node's last sign of
	// life. Timed before it, the halt preceded that renewal, and the invariant checker held
	// the node's fence to a live node's limit (a false "live node fenced" in a benchmark).
	a.mu.Lock()
	a.halts[node] = append(a.halts[node], time.Now())
	p := s.proc
	a.mu.Unlock()
	kill(p)
	a.Cut(node)
}

// Resets returns when each node's watchdog reset its machine.
func (a *NodeAgents) Resets() map[string][]time.Time { return a.copyTimes(a.resets) }

// Halts returns when each node's machine was halted.
func (a *NodeAgents) Halts() map[string][]time.Time { return a.copyTimes(a.halts) }

func (a *NodeAgents) copyTimes(m map[string][]time.Time) map[string][]time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string][]time.Time{}
	for n, ts := range m {
		out[n] = slices.Clone(ts)
	}
	return out
}

// WaitReports waits until every node's agent has reported, and every armed one has
// reported its watchdog armed.
func (a *NodeAgents) WaitReports(ctx context.Context, timeout time.Duration) error {
	var missing string
	// One list per poll: a GET per agent, at 100 agents, spent the harness's request
	// budget and left it waiting on its own rate limiter.
	sel := nodeagent.ComponentLabel + "=" + nodeagent.Component
	err := pollUntil(ctx, 200*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
		list, err := a.h.Cluster.Client.CoordinationV1().Leases(ControllerNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			// An API server loaded by a hundred agents starting may time one list out:
			// the next poll asks again.
			missing = "the reports: " + err.Error()
			return false, nil
		}
		reports := map[string]*coordinationv1.Lease{}
		for i := range list.Items {
			reports[list.Items[i].Name] = &list.Items[i]
		}
		for name := range a.agents {
			l, ok := reports[nodeagent.LeaseName(name)]
			if !ok {
				missing = "no report of " + name + a.agentState(name)
				return false, nil
			}
			r, err := nodeagent.Decode(l)
			if err != nil {
				return false, err
			}
			if !a.o.Unarmed[name] && !r.Watchdog.Armed {
				missing = fmt.Sprintf("the watchdog of %s is not armed: %s", name, r.Watchdog.Stopped)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("node agents: %s: %w", missing, err)
	}
	return nil
}

// agentState says whether node's agent process runs, with the tail of its log.
func (a *NodeAgents) agentState(node string) string {
	a.mu.Lock()
	p := a.agents[node].proc
	a.mu.Unlock()
	if p == nil {
		return " (its agent was never started)"
	}
	state := "running"
	if p.exited() {
		state = fmt.Sprintf("exited: %v", p.waitErr)
	}
	return fmt.Sprintf(" (its agent, pid %d, %s; its log ends:\n%s)", p.pid(), state, p.logTail(15))
}

// Stop stops every agent, emulated watchdog and link.
func (a *NodeAgents) Stop() {
	a.done()
	if a.sw != nil {
		defer a.sw.Close()
	}
	for _, s := range a.agents {
		a.mu.Lock()
		p := s.proc
		a.mu.Unlock()
		if p != nil {
			_ = p.stop(5 * time.Second)
		}
		if s.emu != nil {
			_ = s.emu.Close()
		}
		if s.link != nil {
			s.link.Close()
		}
	}
}
