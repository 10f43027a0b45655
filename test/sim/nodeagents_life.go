package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

// The node agents' lives beside their machines': a machine powered off runs no agent and
// no watchdog, one powered on boots a new agent; an agent stopped for good (SIGTERM, as
// helm uninstall or a nodeSelector change does) stays stopped; a DaemonSet rollout
// replaces them one at a time.

// kill ends p at once, as a reset or a power loss does: no signal handler runs.
func kill(p *process) {
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	_ = p.stop(0)
}

// watchPower follows every node's power, as its kubelet last read it, until ctx ends.
func (a *NodeAgents) watchPower(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for name, s := range a.agents {
			n := a.h.Cluster.Node(name)
			off := n.PoweredOff()
			a.mu.Lock()
			was, gone, p, emu := s.off, s.gone, s.proc, s.emu
			s.off = off
			if !off {
				s.halted = false
			}
			if off && !was {
				s.emuOff = emu != nil
			}
			a.mu.Unlock()
			switch {
			case off && !was:
				kill(p)
				if emu != nil {
					_ = emu.Close() // no power, no countdown
				}
			case !off && was && !gone:
				if err := a.boot(s, n.BootID()); err != nil {
					a.h.Cluster.logf("sim: node %s: start its agent after power on: %v", name, err)
				}
			}
		}
	}
}

// boot starts a new agent for s on the machine's boot bootID, with its watchdog.
func (a *NodeAgents) boot(s *simAgent, bootID string) error {
	if err := os.WriteFile(filepath.Join(s.dir, "boot_id"), []byte(bootID+"\n"), 0o644); err != nil {
		return err
	}
	a.mu.Lock()
	if s.emuOff {
		s.emu, s.emuOff = &watchdog.Emulator{Path: s.emu.Path, Expired: s.emu.Expired}, false
		if err := s.emu.Start(); err != nil {
			a.mu.Unlock()
			return err
		}
	}
	a.mu.Unlock()
	return a.run(s)
}

// StopAgent ends node's agent with SIGTERM and starts no other: it reports, disarms if
// its node may live, and leaves its peers. The machine and its kubelet run on.
func (a *NodeAgents) StopAgent(node string) error {
	s := a.agents[node]
	a.mu.Lock()
	s.gone = true
	p := s.proc
	a.mu.Unlock()
	return p.stop(10 * time.Second)
}

// CutAgentFromAPIServer cuts node's agent from the API server for good; its peers still
// hear it, and its kubelet runs on.
func (a *NodeAgents) CutAgentFromAPIServer(node string) { a.agents[node].link.Cut() }

// Roll replaces every agent, one at a time, as a DaemonSet rollout with maxUnavailable 1:
// SIGTERM, a new agent, and the next only once it has reported its watchdog armed.
func (a *NodeAgents) Roll(ctx context.Context) error {
	for _, n := range a.h.Cluster.Nodes() {
		a.mu.Lock()
		skip := a.agents[n.Name()].gone || a.agents[n.Name()].off
		a.mu.Unlock()
		if skip {
			continue
		}
		began := time.Now()
		if err := a.Restart(n.Name(), false); err != nil {
			return err
		}
		if err := a.waitArmedSince(ctx, n.Name(), began); err != nil {
			return err
		}
	}
	return nil
}

// waitArmedSince waits until node's agent reported its watchdog armed (or, unarmed, any
// report) after since.
func (a *NodeAgents) waitArmedSince(ctx context.Context, node string, since time.Time) error {
	var last string
	err := pollUntil(ctx, 500*time.Millisecond, 3*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := a.h.Cluster.Client.CoordinationV1().Leases(ControllerNamespace).Get(ctx, nodeagent.LeaseName(node), metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		r, err := nodeagent.Decode(l)
		if err != nil || l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(since) {
			last = fmt.Sprintf("no report since %s", since.Format(time.RFC3339Nano))
			return false, nil
		}
		last = "watchdog not armed: " + r.Watchdog.Stopped
		return r.Watchdog.Armed || a.o.Unarmed[node], nil
	})
	if err != nil {
		return fmt.Errorf("node agent of %s after its restart: %s%s: %w", node, last, a.agentState(node), err)
	}
	return nil
}

// actOnAgents carries out a step's action on the node agents (agentActions, and
// cutFromController, which cuts a node off from the controller's seats among them).
func (r *runner) actOnAgents(ctx context.Context, action string, nodes []string) error {
	switch action {
	case ActCrash:
		for _, n := range nodes {
			r.agents.Halt(n)
		}
	case ActKillNodeAgent:
		for _, n := range nodes {
			if err := r.agents.Kill(n); err != nil {
				return err
			}
		}
	case ActCutFromController:
		for _, n := range nodes {
			r.agents.CutFromController(n)
		}
	case ActRollNodeAgents:
		return r.agents.Roll(ctx)
	case ActKillNodeAgents:
		for _, n := range r.h.Cluster.Nodes() {
			if err := r.agents.Restart(n.Name(), true); err != nil {
				return err
			}
		}
	case ActStopNodeAgent:
		for _, n := range nodes {
			if err := r.agents.StopAgent(n); err != nil {
				return err
			}
		}
	case ActCutNodeAgentFromAPIServer:
		for _, n := range nodes {
			r.agents.CutAgentFromAPIServer(n)
		}
	}
	return nil
}
