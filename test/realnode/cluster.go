// Package realnode runs a Kubernetes cluster of real kubelets for end-to-end tests: the
// control plane of test/sim (kube-apiserver, etcd, kube-controller-manager with every
// controller, attach-detach included, and kube-scheduler), and N nodes, each a kubelet
// v1.36.3 with its own containerd and CNI bridge in network, mount, PID and UTS namespaces
// of its own. Each node's power is an ipmi_sim BMC: off kills every process of the node at
// once, on boots it with a new boot ID. A node can also crash (die with its BMC still
// on), hang (freezer cgroup) or lose its network (link down). A local registry serves the
// images; containerd mirrors docker.io and registry.k8s.io to it, so a chart's default
// image names resolve there. Pods reach the pods of other nodes (each node routes the
// others' pod networks over the bridge) and Services by name (dns.go).
//
// It needs root, cgroup v1, containerd, runc, the CNI plugins, iptables, ipmi_sim and
// ipmitool (hack/deps.sh installs them) and the kubelet that hack/controlplane.sh builds.
package realnode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/hack/images/imagebuild"
	"github.com/kubefence/kubefence/test/sim"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

const (
	bridgeName = "kfbr0"
	lockFile   = "/run/kubefence-realnode.lock"
)

// Options configure Start.
type Options struct {
	// Dir holds everything the cluster writes; the caller owns it.
	Dir string
	// Nodes is the number of nodes, named node-1 … node-N.
	Nodes int
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)
	// LeaseDuration is the kubelets' nodeLeaseDurationSeconds (they renew their Lease
	// every quarter of it) and StatusUpdate their nodeStatusUpdateFrequency; zero means
	// the kubelet's defaults, KubeletLeaseDuration and KubeletStatusUpdate.
	LeaseDuration, StatusUpdate time.Duration
	// KubeVersion is the Kubernetes release of the control plane and the kubelets, built
	// by hack/controlplane.sh into .cache/controlplane/<version>/bin; empty means
	// sim.KubeVersion. etcd is always sim.KubeVersion's.
	KubeVersion string
	// BMCOffDelay makes the named nodes' BMCs slow: each acknowledges a power off at once
	// and cuts the power that long after (bmc.IPMIOptions.OffDelay).
	BMCOffDelay map[string]time.Duration
}

// OldestKubeVersion is the oldest Kubernetes release the chart admits (its kubeVersion),
// which hack/deps.sh builds and a real-node test runs on: v1.31.13, since the module
// proxy serves no v0.31.14 of k8s.io/kube-scheduler, k8s.io/endpointslice or
// k8s.io/kube-controller-manager.
const OldestKubeVersion = "v1.31.13"

// The kubelet's defaults for Options.LeaseDuration and Options.StatusUpdate.
const (
	KubeletLeaseDuration = 40 * time.Second
	KubeletStatusUpdate  = 10 * time.Second
)

// Cluster is a running control plane, registry and set of real nodes.
type Cluster struct {
	*sim.Cluster
	// Registry is the local registry's host:port.
	Registry string

	dir    string
	lock   *os.File // held from Start to Stop
	nodes  []*Node
	bmcs   []*bmc.IPMISim
	bridge *bridge
	// stopRegistry ends the registry (hack/images' own) and returns its error.
	stopRegistry func() error
	logf         func(format string, args ...any)
	// attachLog is the CSI driver's record of attaches and detaches.
	attachLog string
	daemons   []func() // stop the host processes beside the control plane
	cancel    context.CancelFunc
	loops     sync.WaitGroup
	stop      sync.Once
}

// Start brings up the cluster and waits until every node is Ready. On failure it stops
// whatever it had started.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := checkHost(); err != nil {
		return nil, err
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	c := &Cluster{logf: opts.Logf, dir: opts.Dir}
	// One real-node cluster per machine at a time: bridge, addresses, namespaces and
	// cgroups have fixed names. A second run waits here until the first has stopped.
	lock, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return nil, fmt.Errorf("lock %s: %w", lockFile, err)
	}
	c.lock = lock
	if err := c.start(ctx, opts); err != nil {
		return nil, errors.Join(fmt.Errorf("start real-node cluster: %w", err), c.Stop())
	}
	return c, nil
}

// checkHost names whatever this machine lacks and how to get it.
func checkHost() error {
	if os.Geteuid() != 0 {
		return errors.New("real-node cluster: needs root (namespaces, cgroups, bridges)")
	}
	var missing []string
	for _, tool := range []string{"containerd", "runc", "iptables", "nsenter", "unshare", "ip", "ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		missing = append(missing, "/usr/lib/cni/bridge")
	}
	if len(missing) > 0 {
		return fmt.Errorf("real-node cluster: missing %v: run hack/deps.sh (apt-get install containerd runc "+
			"containernetworking-plugins iptables openipmi ipmitool)", missing)
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "freezer")); err != nil {
		return fmt.Errorf("real-node cluster: needs the cgroup v1 freezer at %s/freezer: %w", cgroupRoot, err)
	}
	return nil
}

func (c *Cluster) start(ctx context.Context, opts Options) error {
	began := time.Now()
	root, err := sim.ModuleRoot()
	if err != nil {
		return err
	}
	version := opts.KubeVersion
	if version == "" {
		version = sim.KubeVersion
	}
	binDir := filepath.Join(root, ".cache", "controlplane", version, "bin")
	kubelet := filepath.Join(binDir, "kubelet")
	if _, err := os.Stat(kubelet); err != nil {
		return fmt.Errorf("%s: %w: run KUBE_VERSION=%s hack/controlplane.sh (or make deps)", kubelet, err, version)
	}
	if c.bridge, err = newBridge(ctx, bridgeName); err != nil {
		return err
	}
	if err := c.startRegistry(); err != nil {
		return err
	}
	bin := filepath.Join(opts.Dir, "bin")
	if err := buildTools(ctx, root, bin); err != nil {
		return err
	}
	if err := c.pushTestImages(ctx, bin); err != nil {
		return err
	}
	names := make([]string, opts.Nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i+1)
	}
	c.Cluster, err = sim.Start(ctx, sim.Options{
		Dir:           filepath.Join(opts.Dir, "controlplane"),
		BinDir:        binDir,
		EtcdBin:       filepath.Join(root, ".cache", "controlplane", sim.KubeVersion, "bin", "etcd"),
		Address:       bridgeIP,
		NodeTokens:    names,
		Authorization: "Node,RBAC",
		APIServerArgs: []string{"--kubelet-preferred-address-types=InternalIP"},
		// Every controller, the attach-detach controller included: real kubelets report
		// the volumes they mounted, and Kubernetes' own path attaches and detaches.
		ControllerManagerArgs: []string{"--controllers=*"},
		Logf:                  opts.Logf,
	})
	if err != nil {
		return err
	}
	if err := c.startCSIController(ctx, root); err != nil {
		return err
	}
	if err := c.startDNS(); err != nil {
		return err
	}
	if err := c.startNodes(ctx, opts, names, kubelet, bin); err != nil {
		return err
	}
	if err := c.WaitReady(ctx, names...); err != nil {
		return err
	}
	c.logf("realnode: %d nodes Ready after %s", len(names), time.Since(began).Round(time.Millisecond))
	return nil
}

// startNodes boots a node of each name, each on its kubelet (kubelet, bin's CSI driver)
// with a BMC of its own, and supervises their power until the cluster stops.
func (c *Cluster) startNodes(ctx context.Context, opts Options, names []string, kubelet, bin string) error {
	_, portStr, _ := net.SplitHostPort(c.Host()[len("https://"):])
	apiPort, _ := strconv.Atoi(portStr)
	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	for i, name := range names {
		n := &Node{Name: name, IP: nodeIP(i), index: i, dir: filepath.Join(opts.Dir, "nodes", name),
			cfg: nodeConfig{apiServer: c.Host(), apiPort: apiPort, caPEM: c.CAPEM(), token: c.NodeToken(name),
				registry: c.Registry, bridge: bridgeName, nodes: len(names), kubeletBin: kubelet, csiDriver: filepath.Join(bin, "csidriver"),
				leaseSeconds: int(cmp.Or(opts.LeaseDuration, KubeletLeaseDuration).Seconds()),
				statusUpdate: cmp.Or(opts.StatusUpdate, KubeletStatusUpdate), logf: opts.Logf}}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return err
		}
		hook, err := n.writeOffHook()
		if err != nil {
			return err
		}
		b, err := bmc.StartIPMI(ctx, bmc.IPMIOptions{Dir: filepath.Join(opts.Dir, "bmc", name),
			Address: bridgeIP, PoweredOn: true, OffHook: hook, GUID: bmc.HostGUID(), // the kubelets report the host's
			OffDelay: opts.BMCOffDelay[name]})
		if err != nil {
			return err
		}
		c.nodes = append(c.nodes, n)
		c.bmcs = append(c.bmcs, b)
		if err := n.boot(ctx); err != nil {
			return err
		}
		c.loops.Add(1)
		go c.supervisePower(runCtx, n, b)
	}
	return nil
}

// startRegistry serves an in-memory registry on the bridge, for the nodes' containerd.
func (c *Cluster) startRegistry() error {
	l, err := net.Listen("tcp", net.JoinHostPort(bridgeIP, "0"))
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	c.Registry = l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- imagebuild.ServeRegistry(ctx, l, nil) }()
	c.stopRegistry = func() error { cancel(); return <-done }
	return nil
}

// supervisePower is the node's power supply, driven by its BMC's power log: each power
// on boots the node (so a crashed node, whose BMC still says on, stays down until it is
// power-cycled), each power off kills it if the BMC's hook has not already.
func (c *Cluster) supervisePower(ctx context.Context, n *Node, b *bmc.IPMISim) {
	defer c.loops.Done()
	seen := 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		events, err := b.Events()
		if err != nil {
			continue
		}
		for ; seen < len(events); seen++ {
			switch events[seen].Action {
			case bmc.ActionOn:
				if err := n.boot(ctx); err != nil {
					c.logf("realnode: %v", err)
				}
			case bmc.ActionOff:
				offCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
				if err := n.powerOff(offCtx); err != nil {
					c.logf("realnode: %v", err)
				}
				cancel()
			}
		}
	}
}

// Node returns the node called name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Nodes returns every node in order.
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// BMC returns node name's BMC, or nil.
func (c *Cluster) BMC(name string) *bmc.IPMISim {
	for i, n := range c.nodes {
		if n.Name == name {
			return c.bmcs[i]
		}
	}
	return nil
}

// Crash kills every process of the node at once while its BMC still reports power on: a
// machine that died (kernel panic, lost power supply behind a live BMC). It stays down
// until its BMC powers it off and on again.
func (c *Cluster) Crash(ctx context.Context, name string) error {
	n := c.Node(name)
	if n == nil {
		return fmt.Errorf("crash: no node %q", name)
	}
	return n.powerOff(ctx)
}

// WaitReady polls until every named node reports Ready, or ctx ends.
func (c *Cluster) WaitReady(ctx context.Context, names ...string) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		var notReady []string
		for _, name := range names {
			node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !nodeReady(node) {
				notReady = append(notReady, name)
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodes %v not Ready: %w (logs under each node's logs/)", notReady, ctx.Err())
		case <-tick.C:
		}
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Stop powers every node off, stops the BMCs, the registry and the control plane, and
// removes the bridge and the nodes' cgroups. It is safe to call more than once.
func (c *Cluster) Stop() error {
	var errs []error
	c.stop.Do(func() {
		if c.cancel != nil {
			c.cancel()
		}
		c.loops.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, n := range c.nodes {
			if err := n.powerOff(ctx); err != nil {
				errs = append(errs, err)
			}
			n.removeCgroups()
		}
		for i := len(c.daemons) - 1; i >= 0; i-- {
			c.daemons[i]()
		}
		for _, b := range c.bmcs {
			errs = append(errs, b.Stop())
		}
		if c.stopRegistry != nil {
			errs = append(errs, c.stopRegistry())
		}
		if c.Cluster != nil {
			errs = append(errs, c.Cluster.Stop())
		}
		for _, n := range c.nodes {
			_ = run(ctx, "ip", "netns", "del", n.netns()) // left by a boot that failed half-way
		}
		if c.bridge != nil {
			errs = append(errs, c.bridge.remove(ctx))
		}
		if c.lock != nil {
			c.lock.Close() // releases the flock
		}
	})
	return errors.Join(errs...)
}
