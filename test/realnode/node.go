package realnode

import (
	"context"
	"crypto/rand"
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

// cgroupRoot is where the v1 hierarchies are mounted on these machines.
const cgroupRoot = "/sys/fs/cgroup"

// Files a node's boot checks with protectKernelDefaults, and the values kubelet wants; the
// node sees these fakes instead of the host's own settings, which it must not change.
var kernelDefaults = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

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

// removeCgroups removes the node's cgroups from every hierarchy.
func (n *Node) removeCgroups() {
	hier, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return
	}
	for _, h := range hier {
		removeCgroupTree(filepath.Join(cgroupRoot, h.Name(), n.cgroup()))
	}
}

// Freeze stops every process of the node where it stands, a hung machine, and returns once
// the kernel reports the whole cgroup FROZEN. Thaw resumes it.
func (n *Node) Freeze(ctx context.Context) error {
	if err := n.setFreezer("FROZEN"); err != nil {
		return err
	}
	p := filepath.Join(cgroupRoot, "freezer", n.cgroup(), "freezer.state")
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(p)
		if err == nil && strings.TrimSpace(string(b)) == "FROZEN" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: freezer state %q: %w", n.Name, b, ctx.Err())
		case <-tick.C:
		}
	}
}

// thawAll thaws every cgroup of the node's freezer subtree (a pod frozen on its own too).
func (n *Node) thawAll() {
	_ = filepath.WalkDir(filepath.Join(cgroupRoot, "freezer", n.cgroup()), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "freezer.state" {
			_ = os.WriteFile(p, []byte("THAWED"), 0o644)
		}
		return nil
	})
}

// inCgroup reports whether pid is in the node's freezer cgroup.
func (n *Node) inCgroup(pid int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), ":freezer:/"+n.cgroup()+"\n") {
		return fmt.Errorf("pid %d is not yet in freezer:/%s", pid, n.cgroup())
	}
	return nil
}

// Thaw resumes a frozen node.
func (n *Node) Thaw() error { return n.setFreezer("THAWED") }

func (n *Node) setFreezer(state string) error {
	p := filepath.Join(cgroupRoot, "freezer", n.cgroup(), "freezer.state")
	if err := os.WriteFile(p, []byte(state), 0o644); err != nil {
		return fmt.Errorf("%s: set freezer %s: %w", n.Name, state, err)
	}
	return nil
}

// CutNetwork takes the node's link down: it is alive but partitioned from everything.
func (n *Node) CutNetwork(ctx context.Context) error {
	return run(ctx, "ip", "link", "set", n.hostVeth(), "down")
}

// RestoreNetwork brings the node's link back up.
func (n *Node) RestoreNetwork(ctx context.Context) error {
	return run(ctx, "ip", "link", "set", n.hostVeth(), "up")
}

// setupNetwork creates the node's namespace and its link to the bridge. kubernetes.default
// (10.0.0.1:443) is DNATed to kube-apiserver in the node's namespace: the stand-in for
// kube-proxy, which would program the same rule from the Service's endpoints.
func (n *Node) setupNetwork(ctx context.Context) error {
	ns, veth := n.netns(), n.hostVeth()
	_ = run(ctx, "ip", "netns", "del", ns) // left by a node that died with the test binary
	_ = run(ctx, "ip", "link", "del", veth)
	api := fmt.Sprintf("%s:%d", bridgeIP, n.cfg.apiPort)
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "link", "set", veth, "master", n.cfg.bridge, "up"},
		{"ip", "-n", ns, "addr", "add", n.IP + "/16", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "route", "add", "default", "via", bridgeIP},
		{"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"ip", "netns", "exec", ns, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", serviceIP,
			"-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", api},
		{"ip", "netns", "exec", ns, "iptables", "-t", "nat", "-A", "OUTPUT", "-d", serviceIP,
			"-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", api},
	}
	// Pods reach the pods of other nodes straight over the bridge, as a host-gw network
	// (flannel's) routes them.
	for j := range n.cfg.nodes {
		if j != n.index {
			steps = append(steps, []string{"ip", "-n", ns, "route", "add", podCIDR(j), "via", nodeIP(j)})
		}
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// setupCgroups gives the node a fresh cgroup in every v1 hierarchy (kubelet's
// cgroupRoot), removing what a previous boot left; the node's init joins the freezer one.
func (n *Node) setupCgroups() error {
	hier, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return err
	}
	for _, h := range hier {
		base := filepath.Join(cgroupRoot, h.Name())
		if h.Name() == "unified" || !isDir(base) {
			continue
		}
		dir := filepath.Join(base, n.cgroup())
		removeCgroupTree(dir)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		if h.Name() == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(base, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// removeCgroupTree removes a cgroup directory and its children, deepest first; a cgroup
// that still holds a process stays.
func removeCgroupTree(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			removeCgroupTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// prepareFiles writes the node's configuration and clears what does not survive a power
// cycle (/run: containerd's state and socket, CNI allocations), keeping its disks (images,
// the kubelet's directory).
func (n *Node) prepareFiles() error {
	if err := os.RemoveAll(n.path("run")); err != nil {
		return err
	}
	for _, d := range []string{"run/containerd", "run/netns", "run/cni", "containerd/root", "kubelet",
		"pod-logs", "containers-logs", "logs", "cni", "sys", "etc"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	// Mount points of the node's private views, created once on the host.
	for _, d := range []string{"/var/lib/cni", "/var/log/pods", "/var/log/containers"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		"init.sh":                   n.initScript(),
		"containerd.toml":           n.containerdConfig(),
		"kubelet.yaml":              n.kubeletConfig(),
		"kubeconfig":                n.kubeconfig(),
		"cni/10-kubefence.conflist": n.cniConfig(),
		"boot_id":                   n.bootID + "\n",
		"etc/resolv.conf":           "nameserver 127.0.0.53\n",
		"ca.crt":                    string(n.cfg.caPEM),
	}
	for name, v := range kernelDefaults {
		files["sys/"+strings.ReplaceAll(name, "/", "_")] = v + "\n"
	}
	for name, content := range files {
		mode := os.FileMode(0o600)
		if name == "boot_id" {
			mode = 0o644 // as /proc's: the node agent reads it, not as root
		}
		if err := os.WriteFile(n.path(name), []byte(content), mode); err != nil {
			return err
		}
		if err := os.Chmod(n.path(name), mode); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) initScript() string {
	var mounts strings.Builder
	for name := range kernelDefaults {
		fmt.Fprintf(&mounts, "mount --bind %s /proc/sys/%s\n", n.path("sys", strings.ReplaceAll(name, "/", "_")), name)
	}
	sock := n.path("run/containerd/containerd.sock")
	return fmt.Sprintf(`#!/bin/sh
# PID 1 of node %[1]s. Everything below dies when it is killed: the node's power.
set -eu
boot=$1
echo 0 > %[2]s/freezer/%[3]s/cgroup.procs
hostname %[1]s
%[4]smount --bind %[5]s /proc/sys/kernel/random/boot_id
mount --bind %[6]s /var/lib/cni
mount --bind %[7]s /var/log/pods
mount --bind %[8]s /var/log/containers
mount --bind %[9]s /run/netns
containerd --config %[10]s > %[11]s/containerd-$boot.log 2>&1 &
%[18]s -mode node -node-id %[1]s -endpoint %[17]s/plugins/%[19]s/csi.sock \
	-registration-dir %[17]s/plugins_registry > %[11]s/csidriver-$boot.log 2>&1 &
i=0
until [ -S %[12]s ]; do
	i=$((i+1)); [ $i -lt 600 ] || { echo "containerd did not create %[12]s"; exit 1; }
	sleep 0.05
done
# kubelet restarts when it exits, as systemd's kubelet.service (Restart=always) does: the
# socket is there before containerd's CRI serves, and kubelet quits if it asks too early.
while :; do
	%[13]s --config=%[14]s --kubeconfig=%[15]s --hostname-override=%[1]s --node-ip=%[16]s \
		--root-dir=%[17]s --v=1 >> %[11]s/kubelet-$boot.log 2>&1 || echo "kubelet exited ($?); restarting in 1s" >> %[11]s/kubelet-$boot.log
	sleep 1
done &
wait
`, n.Name, cgroupRoot, n.cgroup(), mounts.String(), n.path("boot_id"), n.path("run/cni"),
		n.path("pod-logs"), n.path("containers-logs"), n.path("run/netns"), n.path("containerd.toml"),
		n.path("logs"), sock, n.cfg.kubeletBin, n.path("kubelet.yaml"), n.path("kubeconfig"), n.IP,
		n.path("kubelet"), n.cfg.csiDriver, CSIDriver)
}

func (n *Node) containerdConfig() string {
	mirror := func(host string) string {
		return fmt.Sprintf(`    [plugins."io.containerd.grpc.v1.cri".registry.mirrors.%q]
      endpoint = ["http://%s"]
`, host, n.cfg.registry)
	}
	return fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  # These machines lack CAP_SYS_RESOURCE.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
  # Every registry a pod may name is served by the test's local registry.
  [plugins."io.containerd.grpc.v1.cri".registry]
%s%s%s`, n.path("containerd/root"), n.path("run/containerd"), n.path("run/containerd/containerd.sock"),
		n.path("run/containerd/containerd.sock.ttrpc"), n.path("containerd/opt"), n.path("cni"),
		mirror("docker.io"), mirror("registry.k8s.io"), mirror(n.cfg.registry))
}

func (n *Node) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
enforceNodeAllocatable: []
protectKernelDefaults: true
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: %s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
podCIDR: %s
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
resolvConf: %s
# The test's stand-in for the cluster DNS (dns.go), on the bridge.
clusterDNS: [%s]
clusterDomain: %s
nodeStatusUpdateFrequency: %s
nodeLeaseDurationSeconds: %d
# The test machine's disk and memory are shared by every node: no eviction for pressure.
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 30
`, n.cgroup(), n.path("run/containerd/containerd.sock"), n.IP, podCIDR(n.index), n.path("etc/resolv.conf"),
		bridgeIP, clusterDomain, n.cfg.statusUpdate, n.cfg.leaseSeconds)
}

func (n *Node) kubeconfig() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kf
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: kubelet
  user:
    token: %s
contexts:
- name: kf
  context: {cluster: kf, user: kubelet}
current-context: kf
`, n.cfg.apiServer, n.path("ca.crt"), n.cfg.token)
}

func (n *Node) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "kubefence-test",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, podCIDR(n.index))
}

// newUUID returns a random (version 4) UUID, the form of /proc/sys/kernel/random/boot_id.
func newUUID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), nil
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
