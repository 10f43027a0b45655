package devicemonitor

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/policy"
)

// Mapper names an agent's target for a node; *fencecall.Caller is one. A Checker that is
// one lets the monitor read a node's device again as soon as the node's mapping changes
// (its target annotation, label or providerID, or the identity it reports), not at the
// next round: a mapping edited to name a powered-off spare would otherwise read as a
// fence for up to a whole interval.
type Mapper interface {
	TargetFor(agent string, node *corev1.Node) string
}

// mappings are what each node's devices were last read as: by node and agent, the
// target and the identity the node reported.
type mappings struct {
	mu   sync.Mutex
	last map[string]map[string]string
}

func mappingOf(target, expect string) string { return target + "\x00" + expect }

// note keeps the mapping each check read.
func (mp *mappings) note(checks []fencecall.TargetCheck) {
	mp.mu.Lock()
	defer mp.mu.Unlock()
	if mp.last == nil {
		mp.last = map[string]map[string]string{}
	}
	for _, tc := range checks {
		if mp.last[tc.Node] == nil {
			mp.last[tc.Node] = map[string]string{}
		}
		mp.last[tc.Node][tc.Agent] = mappingOf(tc.Target, tc.Expect)
	}
}

// changed returns the nodes, among those read before, whose first-level mapping is not
// what their devices were last read as.
func (m *Monitor) changed(nodes []*corev1.Node) []*corev1.Node {
	mapper, ok := m.Checker.(Mapper)
	if !ok {
		return nil
	}
	m.mapped.mu.Lock()
	defer m.mapped.mu.Unlock()
	var out []*corev1.Node
	for _, n := range nodes {
		last, seen := m.mapped.last[n.Name]
		pol, err := policy.Select(m.Policies, n.Labels)
		if !seen || err != nil || pol == nil || len(pol.Levels) == 0 {
			continue
		}
		for _, agent := range pol.Levels[0].Agents {
			target := mapper.TargetFor(agent, n)
			if last[agent] != mappingOf(target, fencecall.ExpectedIdentity(n, target)) {
				out = append(out, n)
				break
			}
		}
	}
	return out
}

// remap reads at once the devices of every node whose mapping changed since its last read.
func (m *Monitor) remap(ctx context.Context, nodes []*corev1.Node) {
	changed := m.changed(m.probed(nodes))
	if len(changed) == 0 {
		return
	}
	names := make([]string, len(changed))
	for i, n := range changed {
		names[i] = n.Name
	}
	klog.FromContext(ctx).Info("Fence device mapping changed; reading the devices now", "nodes", names)
	m.apply(ctx, m.Checker.CheckAll(ctx, m.Policies, changed))
}

// tellMismatch reports a device that proved another machine's: its agent refused to
// read it for the node (plugin.KindTargetMismatch), and refuses any fence through it.
func (m *Monitor) tellMismatch(ctx context.Context, tc fencecall.TargetCheck) {
	klog.FromContext(ctx).Error(tc.Err, "Fence device is another machine's", "node", tc.Node, "agent", tc.Agent,
		"target", tc.Target, "deviceIdentity", tc.Identity, "nodeIdentity", tc.Expect)
	node, err := m.Nodes.Get(tc.Node)
	if err != nil || m.Recorder == nil {
		return
	}
	m.Recorder.Eventf(node, corev1.EventTypeWarning, v1alpha1.ReasonTargetMismatch,
		"agent %s target %s is another machine: the device reports %s, the node %s; a fence through it is refused and its incident held until the mapping (agents[].target) is fixed",
		tc.Agent, tc.Target, orNone(tc.Identity), orNone(tc.Expect))
}

// tellShared reports the systemUUIDs several nodes share (cloned VMs): a BMC's system
// GUID cannot tell those nodes apart.
func (m *Monitor) tellShared(ctx context.Context, nodes []*corev1.Node) {
	shared := fencecall.SharedSystemUUIDs(nodes)
	for id, names := range shared {
		msg := fmt.Sprintf("nodes %s report the same systemUUID %s: a fence device's identity cannot tell them apart; check each node's mapping by hand",
			strings.Join(names, ", "), id)
		klog.FromContext(ctx).Error(nil, "Nodes share a systemUUID", "systemUUID", id, "nodes", names)
		for _, n := range nodes {
			if m.Recorder != nil && strings.EqualFold(strings.TrimSpace(n.Status.NodeInfo.SystemUUID), id) {
				m.Recorder.Event(n, corev1.EventTypeWarning, ReasonSharedSystemUUID, msg)
			}
		}
	}
}

// ReasonSharedSystemUUID is the Event on each node of a systemUUID several nodes report.
const ReasonSharedSystemUUID = "SharedSystemUUID"

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
