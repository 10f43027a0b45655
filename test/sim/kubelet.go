package sim

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// NodeLeaseNamespace holds one Lease per node, renewed by its kubelet.
	NodeLeaseNamespace = "kube-node-lease"
	// apiTimeout bounds each API call of a kubelet so a stuck request never stalls a tick.
	apiTimeout = 10 * time.Second
)

// Node is one simulated kubelet. It heartbeats and runs pods only while it is not crashed
// and its Power reports on.
type Node struct {
	c *Cluster
	// client is the kubelet's own, with the kubelet's own request budget (kubeAPIQPS 50,
	// kubeAPIBurst 100): kubelets do not share one.
	client kubernetes.Interface
	spec   NodeSpec
	index  int
	ip     string
	// kubelet is the kubelet's port, on loopback.
	kubelet *kubeletPort
	// apiCut: the kubelet runs (its port answers, its pods run) but reaches no API server.
	apiCut atomic.Bool

	// tickMu is held for a whole tick, so Crash returns only once no heartbeat is in flight.
	tickMu sync.Mutex

	mu      sync.Mutex
	uid     types.UID
	crashed bool
	off     bool // last power state read was off
	bootID  string
	running map[types.UID]string // pods whose containers "run" on this boot: uid → ns/name
	nextIP  int
	// renewals are when the API server accepted each Lease renewal: the ground truth of a
	// kubelet renewing on time, for the checker.
	renewals []time.Time

	podsChanged chan struct{}
	kick        chan struct{}
}

func newNode(c *Cluster, index int, spec NodeSpec) (*Node, error) {
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("node %s: client: %w", spec.Name, err)
	}
	return &Node{
		c:           c,
		client:      client,
		spec:        spec,
		index:       index,
		ip:          fmt.Sprintf("10.1.0.%d", 10+index),
		bootID:      newBootID(),
		running:     map[types.UID]string{},
		podsChanged: make(chan struct{}, 1),
		kick:        make(chan struct{}, 1),
	}, nil
}

// Name is the Node object's name.
func (n *Node) Name() string { return n.spec.Name }

// Crash stops the kubelet: no Lease renewals, no status updates, no pod handling. Pods keep
// running and power is unaffected. When Crash returns no heartbeat is in flight any more.
func (n *Node) Crash() {
	n.tickMu.Lock()
	defer n.tickMu.Unlock()
	n.mu.Lock()
	n.crashed = true
	n.mu.Unlock()
	n.c.logf("sim: node %s: kubelet crashed", n.Name())
}

// Restart brings the kubelet back as after a power cycle: a new bootID and no running
// containers. A node that is powered off stays dead until its power returns.
func (n *Node) Restart() { n.rebootNow(false, "kubelet restarted") }

// Reset is a watchdog resetting the machine: every container stops and it boots anew (a
// new bootID). A kubelet that was cut off stays cut off (the partition outlives the
// reset); one that ran comes back on the new boot.
func (n *Node) Reset() { n.rebootNow(true, "reset by its watchdog") }

// rebootNow boots the node anew; keepCut leaves a crashed kubelet crashed.
func (n *Node) rebootNow(keepCut bool, what string) {
	n.tickMu.Lock()
	n.mu.Lock()
	crashed := n.crashed
	n.reboot()
	n.crashed = crashed && keepCut
	n.mu.Unlock()
	n.tickMu.Unlock()
	n.c.logf("sim: node %s: %s, bootID %s", n.Name(), what, n.BootID())
	signal(n.kick)
}

// Halt is the machine dying without its BMC's doing (its power domain failed): every
// container stops and the kubelet with them, whatever the BMC says.
func (n *Node) Halt() {
	n.tickMu.Lock()
	n.mu.Lock()
	n.crashed = true
	n.running = map[types.UID]string{}
	n.mu.Unlock()
	n.tickMu.Unlock()
	n.c.logf("sim: node %s: halted", n.Name())
}

// PoweredOff reports whether the node's last power reading was off: its machine is down.
func (n *Node) PoweredOff() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.off
}

// CutFromAPIServer leaves the kubelet running, its port answering and its pods running,
// but it reaches the API server no more: no Lease renewal, no status. A reset or power
// cycle leaves the cut in place.
func (n *Node) CutFromAPIServer() {
	n.apiCut.Store(true)
	n.c.logf("sim: node %s: kubelet cut off from the API server", n.Name())
}

// CutFromController makes the node's kubelet port drop the controller's probes, as a
// network cut between the two would; the API server still hears the kubelet.
func (n *Node) CutFromController() {
	n.kubelet.refused.Store(true)
	n.c.logf("sim: node %s: cut off from the controller", n.Name())
}

// Resume brings a crashed kubelet back with the same boot, as when a partition heals: its
// containers kept running all along.
func (n *Node) Resume() {
	n.tickMu.Lock()
	n.mu.Lock()
	n.crashed = false
	n.mu.Unlock()
	n.tickMu.Unlock()
	n.c.logf("sim: node %s: kubelet resumed, same bootID %s", n.Name(), n.BootID())
	signal(n.kick)
}

// reboot needs n.mu held.
func (n *Node) reboot() {
	n.crashed = false
	n.bootID = newBootID()
	n.running = map[types.UID]string{}
}

// BootID is the boot id the kubelet reports in status.nodeInfo.bootID.
func (n *Node) BootID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.bootID
}

// Alive reports whether the kubelet runs: not crashed and power last read as on.
func (n *Node) Alive() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return !n.crashed && !n.off
}

// Renewals returns when each of the kubelet's Lease renewals was accepted, oldest first.
func (n *Node) Renewals() []time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.renewals)
}

// RunningPods lists (as namespace/name) the pods whose containers run on the node now. A
// crashed kubelet leaves them running; power off stops them all. This, not the API, is the
// ground truth for split-brain checks.
func (n *Node) RunningPods() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.running))
	for _, p := range n.running {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func (n *Node) run(ctx context.Context) {
	defer n.c.loops.Done()
	lease := time.NewTicker(n.c.opts.LeaseRenewInterval)
	defer lease.Stop()
	status := time.NewTicker(n.c.opts.StatusUpdateInterval)
	defer status.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lease.C:
			n.tick(ctx, true, false)
		case <-status.C:
			n.tick(ctx, false, true)
		case <-n.kick:
			n.tick(ctx, true, true)
		case <-n.podsChanged:
			n.tickMu.Lock()
			if n.Alive() {
				n.syncPods(ctx)
			}
			n.tickMu.Unlock()
		}
	}
}

// tick reads the power state and, if the node is alive, heartbeats. A status tick also
// resyncs pods, which retries whatever an earlier event could not finish.
func (n *Node) tick(ctx context.Context, lease, status bool) {
	n.tickMu.Lock()
	defer n.tickMu.Unlock()
	alive, rebooted := n.observePower()
	if !alive || n.apiCut.Load() {
		return
	}
	if lease || rebooted {
		if err := n.renewLease(ctx); err != nil {
			n.c.logf("sim: node %s: renew lease: %v", n.Name(), err)
		} else {
			n.mu.Lock()
			n.renewals = append(n.renewals, time.Now())
			n.mu.Unlock()
		}
	}
	if status || rebooted {
		if err := n.updateStatus(ctx); err != nil {
			n.c.logf("sim: node %s: update status: %v", n.Name(), err)
		}
		n.syncPods(ctx)
	}
}

// observePower reads the BMC. Off kills every container; on after off is a reboot (new
// bootID, a crashed kubelet comes back). A read error keeps the last known state: an
// unreachable BMC says nothing about the node itself.
func (n *Node) observePower() (alive, rebooted bool) {
	n.mu.Lock()
	wasOff := n.off
	n.mu.Unlock()
	on := true
	if n.spec.Power != nil {
		var err error
		if on, err = n.spec.Power.PoweredOn(); err != nil {
			n.c.logf("sim: node %s: read power: %v", n.Name(), err)
			on = !wasOff
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case !on && !wasOff:
		n.off = true
		n.running = map[types.UID]string{}
		n.c.logf("sim: node %s: powered off", n.Name())
		return false, false
	case !on:
		return false, false
	case wasOff:
		n.off = false
		n.reboot()
		n.c.logf("sim: node %s: powered on, booted with bootID %s", n.Name(), n.bootID)
		return true, true
	}
	return !n.crashed, false
}

func newBootID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// signal wakes a loop without blocking; one pending wake-up is enough.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
