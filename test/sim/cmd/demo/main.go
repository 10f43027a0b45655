// Command demo runs kubefence's main job on a local simulated cluster with default
// settings: a node's kubelet dies while its machine keeps running, kubefence powers it off
// through ipmi_sim, verifies it, and releases its StatefulSet pod, which restarts on
// another node. It prints the timeline and checks that nothing was released before the
// BMC logged the power-off.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kubefence/kubefence/test/sim"
)

func main() {
	bin := flag.String("bin", "", "directory holding fence-controller and fence-agent-ipmi (default: build them)")
	nodes := flag.Int("nodes", 3, "number of simulated nodes")
	verbose := flag.Bool("v", false, "print the simulation's progress messages")
	etcd := flag.String("etcd", "", "the etcd executable (default: the one hack/controlplane.sh builds into .cache)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *bin, *etcd, *nodes, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, bin, etcd string, nodes int, verbose bool) error {
	dir, err := os.MkdirTemp("", "kubefence-demo-")
	if err != nil {
		return err
	}
	logf := func(string, ...any) {}
	if verbose {
		logf = func(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }
	}
	say("starting %d-node cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, simulated kubelets, one ipmi_sim BMC per node", nodes)
	h, err := sim.StartHarness(ctx, sim.HarnessOptions{Dir: dir, Nodes: nodes, BinDir: bin, Logf: logf,
		Cluster: func(o *sim.Options) { o.EtcdBin = etcd }})
	if err != nil {
		return fmt.Errorf("%w (work files kept in %s)", err, dir)
	}
	res, err := scenario(ctx, h)
	pids := h.PIDs()
	if serr := h.Stop(); serr != nil && err == nil {
		err = serr
	}
	if left := running(pids); len(left) > 0 && err == nil {
		err = fmt.Errorf("processes left behind: %v", left)
	}
	if err != nil {
		return fmt.Errorf("%w (work files kept in %s)", err, dir)
	}
	say("stopped every process (%d, by PID); none left", len(pids))
	_ = os.RemoveAll(dir)
	fmt.Println(res)
	return nil
}

func scenario(ctx context.Context, h *sim.Harness) (string, error) {
	c := h.Cluster
	say("deploying StatefulSet web (1 replica, RWO volume) and Deployment app (3 replicas)")
	if err := c.DeployStatefulSet(ctx, "web", 1); err != nil {
		return "", err
	}
	if err := c.Deploy(ctx, "app", 3); err != nil {
		return "", err
	}
	web0, err := c.Client.CoreV1().Pods(sim.Namespace).Get(ctx, "web-0", metaGet)
	if err != nil {
		return "", err
	}
	victim := web0.Spec.NodeName
	rec, err := sim.NewRecorder(ctx, c)
	if err != nil {
		return "", err
	}
	say("starting fence-controller with default settings (node Lease stale after %s)", h.Config.Detection.LeaseStaleAfter.Duration)
	if _, err := h.StartController("fence-controller"); err != nil {
		return "", err
	}
	leader, err := h.WaitLeader(ctx)
	if err != nil {
		return "", err
	}
	say("fence-controller %s is leader", leader)
	say("waiting until it has seen %s renew its Lease twice (until then a fresh leader waits the Lease's whole duration, 40s)", victim)
	if err := sim.WaitLeaseRenewals(ctx, h.Cluster.Client, victim); err != nil {
		return "", err
	}

	say("crashing %s: its kubelet stops, the machine (BMC) stays on, web-0 is stuck there", victim)
	c.Node(victim).Crash()
	crashAt := time.Now()
	moved, err := waitMoved(ctx, h, victim)
	if err != nil {
		return "", err
	}
	power, err := h.BMCs[victim].Events()
	if err != nil {
		return "", err
	}
	incs, err := sim.Incidents(ctx, c, victim)
	if err != nil {
		return "", err
	}
	seen := rec.All()
	fmt.Printf("\nTimeline (seconds after %s's kubelet stopped):\n", victim)
	sim.PrintTimeline(os.Stdout, crashAt, sim.Timeline(victim, crashAt, incs, power, seen))
	fmt.Println()
	if v := sim.CheckReleasedAfterFence(seen, victim, power); len(v) > 0 {
		return "", fmt.Errorf("safety check failed: %v", v)
	}
	for name, b := range h.BMCs {
		ev, err := b.Events()
		if err != nil {
			return "", err
		}
		if name != victim {
			if v := sim.CheckUntouched(seen, name, ev); len(v) > 0 {
				return "", fmt.Errorf("safety check failed: %v", v)
			}
		}
	}
	say("safety check passed: nothing of %s was released before its BMC logged power off; other nodes untouched", victim)
	return fmt.Sprintf("\nweb-0 moved from %s to %s; running again %.1fs after the crash.", victim, moved, runningAgainAfter(seen, crashAt)), nil
}
