package sim

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
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

// register creates the Node object and, if the node is powered on, its first heartbeat.
func (n *Node) register(ctx context.Context) error {
	// The kubelet labels its node with its host's name, which a label value holds (63
	// characters); a longer node name (an FQDN a cloud provider gives, say) comes with
	// the host's short name.
	hostname := n.Name()
	if len(hostname) > 63 {
		hostname, _, _ = strings.Cut(hostname, ".")
	}
	labels := map[string]string{
		"kubernetes.io/hostname": hostname,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
	}
	for k, v := range n.spec.Labels {
		labels[k] = v
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: n.Name(), Labels: labels, Annotations: n.spec.Annotations,
	}}
	created, err := n.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("register node %s: %w", n.Name(), err)
	}
	n.mu.Lock()
	n.uid = created.UID
	n.mu.Unlock()
	if alive, _ := n.observePower(); !alive {
		return nil
	}
	if err := n.updateStatus(ctx); err != nil {
		return fmt.Errorf("register node %s: %w", n.Name(), err)
	}
	if err := n.renewLease(ctx); err != nil {
		return fmt.Errorf("register node %s: %w", n.Name(), err)
	}
	return nil
}

// leaseDuration is the leaseDurationSeconds a kubelet renewing every interval writes: the
// kubelet renews every quarter of its nodeLeaseDurationSeconds (40s by default, so 10s).
func leaseDuration(interval time.Duration) int32 {
	return int32(max((4*interval+time.Second-1)/time.Second, 1))
}

// renewLease creates or renews the node Lease, owned by the Node as the kubelet does it.
func (n *Node) renewLease(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	leases := n.client.CoordinationV1().Leases(NodeLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	holder, duration := n.Name(), leaseDuration(n.c.opts.LeaseRenewInterval)
	l, err := leases.Get(ctx, n.Name(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n.mu.Lock()
		owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: n.Name(), UID: n.uid}
		n.mu.Unlock()
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name(), Namespace: NodeLeaseNamespace,
				OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder,
				LeaseDurationSeconds: &duration, RenewTime: &now},
		}
		if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create lease: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get lease: %w", err)
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &duration, &now
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update lease: %w", err)
	}
	return nil
}

// updateStatus posts Ready=True with a fresh heartbeat, capacity, addresses and bootID.
func (n *Node) updateStatus(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	nodes := n.client.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := nodes.Get(ctx, n.Name(), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get node: %w", err)
		}
		n.applyStatus(&node.Status, metav1.Now())
		if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update node status: %w", err)
		}
		return nil
	})
}

func (n *Node) applyStatus(s *corev1.NodeStatus, now metav1.Time) {
	res := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("4"),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("50Gi"),
	}
	s.Capacity, s.Allocatable = res, res.DeepCopy()
	// The kubelet's port is on loopback; the node's own address (its pods' host IP) is
	// no address here, and a probe of it would only time out.
	s.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
		{Type: corev1.NodeHostName, Address: n.Name()},
	}
	if ip := n.spec.ExternalIP; ip != "" {
		s.Addresses = append(s.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: ip})
	}
	sum := sha256.Sum256([]byte(n.Name()))
	s.NodeInfo = corev1.NodeSystemInfo{
		BootID: n.BootID(), MachineID: hex.EncodeToString(sum[:16]),
		SystemUUID: hex.EncodeToString(sum[16:]), KernelVersion: "6.1.0-sim",
		OSImage: "kubefence simulated node", ContainerRuntimeVersion: "sim://1.0",
		KubeletVersion: KubeVersion, OperatingSystem: "linux", Architecture: "amd64",
	}
	s.DaemonEndpoints.KubeletEndpoint.Port = n.kubelet.port()
	s.Conditions = setNodeCondition(s.Conditions, corev1.NodeReady, corev1.ConditionTrue,
		"KubeletReady", "kubelet is posting ready status", now)
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure,
		corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		s.Conditions = setNodeCondition(s.Conditions, t, corev1.ConditionFalse,
			"KubeletHasSufficientResources", "simulated", now)
	}
}

// setNodeCondition refreshes the heartbeat and moves the transition time only on change,
// as the kubelet does; the node lifecycle controller relies on both.
func setNodeCondition(conds []corev1.NodeCondition, t corev1.NodeConditionType,
	status corev1.ConditionStatus, reason, msg string, now metav1.Time) []corev1.NodeCondition {
	for i := range conds {
		if conds[i].Type != t {
			continue
		}
		if conds[i].Status != status {
			conds[i].LastTransitionTime = now
		}
		conds[i].Status, conds[i].Reason, conds[i].Message = status, reason, msg
		conds[i].LastHeartbeatTime = now
		return conds
	}
	return append(conds, corev1.NodeCondition{Type: t, Status: status, Reason: reason,
		Message: msg, LastHeartbeatTime: now, LastTransitionTime: now})
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

// WaitLeaseRenewals waits until node's Lease has been renewed twice more, so that a
// controller watching it has measured its renewal cadence: until then a leader's evidence
// floor is the Lease's whole duration (docs/safety-model.md §10), which would measure a
// fresh leader, not the steady state.
func WaitLeaseRenewals(ctx context.Context, client kubernetes.Interface, node string) error {
	var last *metav1.MicroTime
	changes := 0
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases(NodeLeaseNamespace).Get(ctx, node, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return false, nil
		}
		if last != nil && !l.Spec.RenewTime.Equal(last) {
			changes++
		}
		last = l.Spec.RenewTime
		return changes >= 2, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for two renewals of %s's Lease: %w", node, err)
	}
	return nil
}
