package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// nodeConfig is what a node needs from its cluster to boot.
type nodeConfig struct {
	apiServer  string // https://10.77.0.1:PORT
	apiPort    int
	caPEM      []byte
	token      string
	registry   string // host:port of the local registry
	bridge     string
	nodes      int // in the cluster: every other node's pod network is routed
	kubeletBin string
	csiDriver  string // the CSI driver's binary, run in node mode
	// The kubelet's nodeLeaseDurationSeconds and nodeStatusUpdateFrequency.
	leaseSeconds int
	statusUpdate time.Duration
	logf         func(format string, args ...any)
}

// Node is one real kubelet with its own containerd, in network, mount, PID and UTS
// namespaces of its own. Its power is driven by its BMC (Cluster.BMC): powered off, every
// process of the node dies at once; powered on, it boots with a new boot ID.
type Node struct {
	Name  string
	IP    string
	index int
	dir   string
	cfg   nodeConfig

	mu     sync.Mutex
	proc   *exec.Cmd     // unshare, whose child is the node's init (PID 1 of its namespace)
	exited chan struct{} // closed when proc has been reaped and the node torn down
	boots  int
	bootID string
}

func (n *Node) netns() string    { return "kf-" + n.Name }
func (n *Node) hostVeth() string { return fmt.Sprintf("kfh%d", n.index) }
func (n *Node) cgroup() string   { return "kf-" + n.Name }
func (n *Node) path(p ...string) string {
	return filepath.Join(append([]string{n.dir}, p...)...)
}

// Running reports whether the node's processes are alive.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil
}

// BootID is the boot ID of the node's current (or last) boot.
func (n *Node) BootID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.bootID
}

// boot powers the node on: a fresh network namespace and cgroups, then containerd and the
// kubelet under a new PID namespace whose init the BMC's power-off kills.
func (n *Node) boot(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		return nil
	}
	n.boots++
	id, err := newUUID()
	if err != nil {
		return err
	}
	n.bootID = id
	if err := n.prepareFiles(); err != nil {
		return fmt.Errorf("boot %s: %w", n.Name, err)
	}
	if err := n.setupNetwork(ctx); err != nil {
		return fmt.Errorf("boot %s: %w", n.Name, err)
	}
	if err := n.setupCgroups(); err != nil {
		return fmt.Errorf("boot %s: %w", n.Name, err)
	}
	logf, err := os.Create(n.path("logs", fmt.Sprintf("boot-%d.log", n.boots)))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", "--net=/run/netns/"+n.netns(), "--",
		"unshare", "--pid", "--fork", "--kill-child", "--mount", "--uts", "--propagation", "private",
		"--mount-proc", "--", "/bin/sh", n.path("init.sh"), strconv.Itoa(n.boots))
	cmd.Stdout, cmd.Stderr = logf, logf
	// The node dies with the test binary, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("boot %s: %w", n.Name, err)
	}
	n.proc = cmd
	n.exited = make(chan struct{})
	go n.reap(cmd, n.exited)
	if err := n.recordInit(ctx, cmd.Process.Pid); err != nil {
		return fmt.Errorf("boot %s: %w", n.Name, err)
	}
	n.cfg.logf("realnode: %s booted (boot %d, id %s, pid %d)", n.Name, n.boots, id, cmd.Process.Pid)
	return nil
}

// reap waits for the node's processes to end and removes its network namespace, so the
// node is off the network at once, as a machine without power is.
func (n *Node) reap(cmd *exec.Cmd, done chan struct{}) {
	err := cmd.Wait()
	// Cleared at once: from here on the PID may belong to another process.
	n.mu.Lock()
	if n.proc == cmd {
		n.proc = nil
	}
	n.mu.Unlock()
	_ = os.Remove(n.path("init.pid"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = run(ctx, "ip", "netns", "del", n.netns())
	n.cfg.logf("realnode: %s is off (%v)", n.Name, err)
	close(done)
}

// powerOff kills every process of the node at once (the init of its PID namespace) and
// waits until they are gone. A frozen node is thawed after the kill, as a power cut ends a
// hung machine too.
func (n *Node) powerOff(ctx context.Context) error {
	n.mu.Lock()
	cmd, exited := n.proc, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if init, err := n.initPID(cmd.Process.Pid); err == nil {
		_ = syscall.Kill(init, syscall.SIGKILL)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	n.thawAll()
	select {
	case <-exited:
	case <-ctx.Done():
		return fmt.Errorf("power off %s: processes still running: %w", n.Name, ctx.Err())
	}
	// unshare may be reaped before the kernel has finished killing the namespace.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		pids := n.Processes()
		if len(pids) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("power off %s: processes %v still in its cgroup: %w", n.Name, pids, ctx.Err())
		case <-tick.C:
		}
	}
}

// initPID is the host PID of the node's init: the only child of unshare.
func (n *Node) initPID(unshare int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", unshare, unshare))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		return 0, fmt.Errorf("unshare %d has children %q", unshare, f)
	}
	return strconv.Atoi(f[0])
}

// recordInit writes the host PID of the node's init where the BMC's power-off hook reads
// it, once unshare has forked it.
func (n *Node) recordInit(ctx context.Context, unshare int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		// Written only once the init has joined the node's freezer cgroup, which the
		// power-off hook checks before it kills.
		pid, err := n.initPID(unshare)
		if err == nil {
			if err = n.inCgroup(pid); err == nil {
				return os.WriteFile(n.path("init.pid"), []byte(strconv.Itoa(pid)), 0o600)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("find the init of unshare %d: %w", unshare, errors.Join(err, ctx.Err()))
		case <-tick.C:
		}
	}
}

// writeOffHook writes the script the node's BMC runs when it cuts power: it kills the
// node's init (so every process of the node) and waits until it is gone, so the BMC
// reports power off only once the node is dead. It checks that the PID still belongs to
// the node's cgroup before it kills.
func (n *Node) writeOffHook() (string, error) {
	path := n.path("power-off.sh")
	freezer := filepath.Join(cgroupRoot, "freezer", n.cgroup())
	script := fmt.Sprintf(`#!/bin/sh
# Cuts the power of node %[2]s: kills every process in its freezer cgroup (its init first,
# which ends its PID namespace), thaws the subtree so frozen processes can die, and fails
# (so the BMC does not report off) if any process is left after 10s.
pid=$(cat %[1]s 2>/dev/null)
if [ -n "$pid" ] && grep -q ':freezer:/%[2]s$' /proc/$pid/cgroup 2>/dev/null; then kill -KILL "$pid" 2>/dev/null; fi
for f in $(find %[3]s -name cgroup.procs); do
	for p in $(cat "$f"); do kill -KILL "$p" 2>/dev/null; done
done
find %[3]s -name freezer.state | while read -r f; do echo THAWED > "$f" 2>/dev/null; done
i=0
while [ -n "$(find %[3]s -name cgroup.procs -exec cat {} +)" ]; do
	i=$((i+1)); [ $i -lt 1000 ] || exit 1
	sleep 0.01
done
exit 0
`, n.path("init.pid"), n.cgroup(), freezer)
	return path, os.WriteFile(path, []byte(script), 0o700)
}

// Processes lists the PIDs in the node's freezer cgroup and its children: every process
// of the node.
func (n *Node) Processes() []int {
	var pids []int
	_ = filepath.WalkDir(filepath.Join(cgroupRoot, "freezer", n.cgroup()), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}
