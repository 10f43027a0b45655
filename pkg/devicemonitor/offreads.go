package devicemonitor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// offReads are the first-level fence devices the target monitor read off while their
// node may be alive. A device that reads off while its node renews its Lease after the
// read is not that node's machine: the mapping names another (a spare machine's BMC, an
// initiator name with a typo that reads as cut), and a fence through it would "verify"
// without touching the node. Such a node is marked (v1alpha1.TargetReadsOffAnnotation),
// told about (a TargetReadsOff Event, kubefence_target_reads_off) and its fencing held
// until a check reads the device on again, a person removes the mark, or forces the
// incident. Only a renewal seen well after the read counts (margin: two renewal
// periods): a node whose power was cut a moment before the check reads off too, and is
// dead, and its last renewal may reach this replica late.
type offReads struct {
	gauge  *prometheus.GaugeVec
	margin time.Duration

	mu sync.Mutex
	// pending are reads of off not yet contradicted by a renewal, by node.
	pending map[string]fencecall.TargetCheck
}

func newOffReads(reg prometheus.Registerer, renewInterval time.Duration) *offReads {
	o := &offReads{pending: map[string]fencecall.TargetCheck{}, margin: 2 * max(renewInterval, 10*time.Second), gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubefence_target_reads_off",
		Help: "1 for a node whose first-level fence device read off while the node renewed its Lease after the read: the target mapping names another machine, and the node's fencing is held.",
	}, []string{"node", "agent"})}
	reg.MustRegister(o.gauge)
	return o
}

// note keeps the reads of off of a monitor round, and returns the checks of nodes whose
// device read on again for the agent their mark names: the mark goes.
func (o *offReads) note(checks []fencecall.TargetCheck) []fencecall.TargetCheck {
	o.mu.Lock()
	defer o.mu.Unlock()
	var cleared []fencecall.TargetCheck
	for _, tc := range checks {
		switch {
		case tc.Err == nil && tc.State == plugin.StateOff:
			o.pending[tc.Node] = tc
		case tc.Err == nil:
			if p, ok := o.pending[tc.Node]; ok && p.Agent == tc.Agent {
				delete(o.pending, tc.Node)
			}
			o.gauge.DeleteLabelValues(tc.Node, tc.Agent)
			cleared = append(cleared, tc)
		}
	}
	return cleared
}

// contradicted returns the read of off of node that a renewal seen at lastLife (on the
// controller's clock, as the read's time is) contradicts, if any.
func (o *offReads) contradicted(node string, lastLife time.Time) (fencecall.TargetCheck, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	tc, ok := o.pending[node]
	if !ok || !lastLife.After(tc.At.Add(o.margin)) {
		return fencecall.TargetCheck{}, false
	}
	delete(o.pending, node)
	return tc, true
}

// checkPending marks every node whose read of off a renewal seen since contradicts.
func (m *Monitor) checkPending(ctx context.Context) {
	m.off.mu.Lock()
	nodes := make([]string, 0, len(m.off.pending))
	for n := range m.off.pending {
		nodes = append(nodes, n)
	}
	m.off.mu.Unlock()
	for _, name := range nodes {
		tc, ok := m.off.contradicted(name, m.LastLife(name))
		if !ok {
			continue
		}
		if err := m.mark(ctx, name, tc); err != nil {
			klog.FromContext(ctx).Error(err, "Marking a node whose fence device reads off", "node", name)
			m.off.mu.Lock()
			m.off.pending[name] = tc // tried again at the next look
			m.off.mu.Unlock()
		}
	}
}

// mark sets node's TargetReadsOffAnnotation for the contradicted read tc, and tells.
func (m *Monitor) mark(ctx context.Context, name string, tc fencecall.TargetCheck) error {
	node, err := m.Nodes.Get(name)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("agent %s read target %s off at %s, and node %s renewed its Lease at %s, after the read: the target is not this node's machine; fencing of the node is held until the mapping (agents[].target) is fixed and the device reads on, or a person removes %s or forces the incident",
		tc.Agent, tc.Target, fencer.Stamp(tc.At), name, fencer.Stamp(m.LastLife(name)), v1alpha1.TargetReadsOffAnnotation)
	m.off.gauge.WithLabelValues(name, tc.Agent).Set(1)
	if node.Annotations[v1alpha1.TargetReadsOffAnnotation] == msg {
		return nil
	}
	if err := m.patchMark(ctx, name, msg); err != nil {
		return err
	}
	klog.FromContext(ctx).Error(nil, "Fence device reads off while its node lives", "node", name, "agent", tc.Agent, "target", tc.Target)
	if m.Recorder != nil {
		m.Recorder.Event(node, corev1.EventTypeWarning, v1alpha1.ReasonTargetReadsOff, msg)
	}
	return nil
}

// clear removes the mark of a node whose marked agent's device read on.
func (m *Monitor) clear(ctx context.Context, tc fencecall.TargetCheck) {
	node, err := m.Nodes.Get(tc.Node)
	if err != nil || !strings.HasPrefix(node.Annotations[v1alpha1.TargetReadsOffAnnotation], "agent "+tc.Agent+" ") {
		return // no mark, or one another agent's device earned
	}
	if err := m.patchMark(ctx, tc.Node, ""); err != nil {
		klog.FromContext(ctx).Error(err, "Removing the mark of a node whose fence device reads on again", "node", tc.Node)
	}
}

// patchMark sets (msg) or removes ("") node's TargetReadsOffAnnotation, after a Lease
// check as every write.
func (m *Monitor) patchMark(ctx context.Context, node, msg string) error {
	if err := m.Confirm(ctx); err != nil {
		return err
	}
	var value any
	if msg != "" {
		value = msg
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{v1alpha1.TargetReadsOffAnnotation: value}}})
	if err != nil {
		return err
	}
	_, err = m.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
