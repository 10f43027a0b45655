package devicemonitor

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/maintenance"
	"github.com/kubefence/kubefence/pkg/policy"
)

// DefaultInterval is how often every node's first-level fence device is read, as
// Pacemaker's monitor reads each stonith device: a broken BMC password shows up weeks
// before the node it guards dies. Each round is jittered by up to a tenth.
const DefaultInterval = 10 * time.Minute

// pendingLook is how often reads of off are held against the nodes' renewals between
// rounds.
const pendingLook = 2 * time.Second

// Checker reads every node's first-level fence devices; *fencecall.Caller is one.
type Checker interface {
	CheckAll(ctx context.Context, policies []v1alpha1.Policy, nodes []*corev1.Node) []fencecall.TargetCheck
}

// Monitor is the leader's fence-device monitor.
type Monitor struct {
	Checker  Checker
	Policies []v1alpha1.Policy
	Nodes    corelisters.NodeLister
	// Client patches the nodes' marks.
	Client kubernetes.Interface
	// LastLife is the latest sign of a node's life the controller saw, on its clock.
	LastLife func(node string) time.Time
	// Confirm passes while this replica leads (a Lease check); nothing is written while
	// it fails.
	Confirm  func(ctx context.Context) error
	Recorder record.EventRecorder
	Interval time.Duration
	// Planned finds the Machines and NodeMaintenances that put a node under maintenance;
	// nil reads only what the Node says.
	Planned *maintenance.Reader

	up     *prometheus.GaugeVec
	off    *offReads
	mapped *mappings
	reads  *lastReads
}

// New is a monitor whose metrics (kubefence_target_up, kubefence_target_reads_off) go to
// reg; renewInterval is the kubelets' Lease renewal period (detection.expectedRenewInterval).
func New(m Monitor, reg prometheus.Registerer, renewInterval time.Duration) *Monitor {
	m.up = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubefence_target_up",
		Help: "1 when the node's first-level fence device answered the last Status check, 0 when it failed (see the controller log for the error); read at start and every --target-check-interval.",
	}, []string{"node", "agent"})
	reg.MustRegister(m.up)
	m.off = newOffReads(reg, renewInterval)
	m.mapped = &mappings{}
	m.reads = &lastReads{}
	if m.Interval <= 0 {
		m.Interval = DefaultInterval
	}
	return &m
}

// Run reads every first-level device now and then every Interval, and between rounds
// holds the reads of off against the nodes' renewals, until ctx ends. Only the leader
// runs it.
func (m *Monitor) Run(ctx context.Context) {
	look := time.NewTicker(pendingLook)
	defer look.Stop()
	for {
		if nodes, err := m.Nodes.List(everything()); err == nil { // a cache read; a failed round is skipped
			checks := m.Checker.CheckAll(ctx, m.Policies, m.probed(nodes))
			m.record(ctx, checks, time.Now())
			m.tellShared(ctx, nodes)
		}
		next := time.After(m.Interval + time.Duration(rand.Int64N(int64(m.Interval/10)+1)))
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return
			case <-look.C:
				if nodes, err := m.Nodes.List(everything()); err == nil {
					m.remap(ctx, nodes)
				}
				m.checkPending(ctx)
			case <-next:
				waiting = false
			}
		}
	}
}

// record keeps a round's reads, ended at at, in place of every read before (LastReads),
// and exports them: they are the only ones of every node.
func (m *Monitor) record(ctx context.Context, checks []fencecall.TargetCheck, at time.Time) {
	m.up.Reset()
	m.reads.replace(checks, at)
	m.export(ctx, checks)
}

// apply keeps the reads of some nodes' devices (LastReads) in place of theirs, and
// exports them.
func (m *Monitor) apply(ctx context.Context, checks []fencecall.TargetCheck) {
	m.reads.update(checks)
	m.export(ctx, checks)
}

// export exports reads, keeps their reads of off and the mapping each read, and tells of
// a device that proved another machine's.
func (m *Monitor) export(ctx context.Context, checks []fencecall.TargetCheck) {
	for _, tc := range m.off.note(checks) {
		m.clear(ctx, tc)
	}
	m.mapped.note(checks)
	for _, tc := range checks {
		up := 0.0
		switch {
		case tc.Up():
			up = 1
		case tc.Mismatch():
			m.tellMismatch(ctx, tc)
		default:
			klog.FromContext(ctx).Error(tc.Err, "Fence device check failed", "node", tc.Node, "agent", tc.Agent, "target", tc.Target)
		}
		m.up.WithLabelValues(tc.Node, tc.Agent).Set(up)
	}
}

// probed are the nodes whose devices a round reads: not those their policy excludes, which
// are never fenced, nor those under maintenance, whose BMC is often being updated or
// powered by hand. Reading them would only raise KubefenceTargetDown; a node's device is
// read again in the first round after it is back. A cordon counts here as the policy
// says, without the drain, which this monitor does not see.
func (m *Monitor) probed(nodes []*corev1.Node) []*corev1.Node {
	out := make([]*corev1.Node, 0, len(nodes))
	for _, n := range nodes {
		pol, err := policy.Select(m.Policies, n.Labels)
		if err == nil && pol != nil && (policy.NewNode(pol, n.Name, n.Labels).Excluded ||
			maintenance.Signal(n, pol.Maintenance.Cordoned, false, m.Planned.Objects(n.Name)) != "") {
			continue
		}
		out = append(out, n)
	}
	return out
}

func everything() labels.Selector { return labels.Everything() }
