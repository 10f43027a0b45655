package devicemonitor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/maintenance"
	"github.com/kubefence/kubefence/pkg/plugin"
)

var t0 = time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)

// reads is a Checker whose devices read as its map says, at its time.
type reads struct {
	state map[string]plugin.PowerState
	errs  map[string]error
	at    time.Time
}

func (r *reads) CheckAll(_ context.Context, _ []v1alpha1.Policy, nodes []*corev1.Node) []fencecall.TargetCheck {
	var out []fencecall.TargetCheck
	for _, n := range nodes {
		out = append(out, fencecall.TargetCheck{Node: n.Name, Agent: "ipmi", Target: "bmc-of-" + n.Name, State: r.state[n.Name], Err: r.errs[n.Name], At: r.at})
	}
	return out
}

type world struct {
	m      *Monitor
	client *fake.Clientset
	idx    cache.Indexer
	life   map[string]time.Time
	events *record.FakeRecorder
	reads  *reads
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{life: map[string]time.Time{}, events: record.NewFakeRecorder(10),
		reads: &reads{state: map[string]plugin.PowerState{"node-1": plugin.StateOff, "node-2": plugin.StateOn}, at: t0}}
	w.idx = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	var objs []*corev1.Node
	for _, name := range []string{"node-1", "node-2"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
		objs = append(objs, n)
		if err := w.idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	w.client = fake.NewClientset(objs[0], objs[1])
	w.m = New(Monitor{Checker: w.reads, Nodes: corelisters.NewNodeLister(w.idx), Client: w.client,
		LastLife: func(n string) time.Time { return w.life[n] }, Confirm: func(context.Context) error { return nil },
		Recorder: w.events}, prometheus.NewRegistry(), 10*time.Second)
	return w
}

func (w *world) round(t *testing.T) {
	t.Helper()
	nodes, err := w.m.Nodes.List(everything())
	if err != nil {
		t.Fatal(err)
	}
	w.m.record(context.Background(), w.m.Checker.CheckAll(context.Background(), nil, w.m.probed(nodes)), t0)
}

// markOf is node's mark as the API server has it; the cache catches up, as the watch would.
func (w *world) markOf(t *testing.T, node string) string {
	t.Helper()
	n, err := w.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.idx.Update(n); err != nil {
		t.Fatal(err)
	}
	return n.Annotations[v1alpha1.TargetReadsOffAnnotation]
}

// TestMarkedOnARenewalAfterTheRead: a device read off is marked only once its node
// renews more than two renewal periods after the read (a node whose power was cut a
// moment before the read reads off too, and its last renewal may arrive late); the mark
// names agent and target, an Event and kubefence_target_reads_off tell; a device that
// reads on is never marked.
func TestMarkedOnARenewalAfterTheRead(t *testing.T) {
	w := newWorld(t)
	w.round(t)
	w.life["node-1"], w.life["node-2"] = t0.Add(5*time.Second), t0.Add(time.Minute)
	w.m.checkPending(context.Background())
	if m := w.markOf(t, "node-1"); m != "" {
		t.Fatalf("marked on a renewal 5s after the read: %q", m)
	}
	w.life["node-1"] = t0.Add(30 * time.Second)
	w.m.checkPending(context.Background())
	if m := w.markOf(t, "node-1"); !strings.Contains(m, "agent ipmi read target bmc-of-node-1 off") {
		t.Fatalf("mark %q, want one naming the agent and target", m)
	}
	if m := w.markOf(t, "node-2"); m != "" {
		t.Errorf("node-2, whose device reads on, marked: %q", m)
	}
	if n := testutil.ToFloat64(w.m.off.gauge.WithLabelValues("node-1", "ipmi")); n != 1 {
		t.Errorf("kubefence_target_reads_off{node-1,ipmi} = %v, want 1", n)
	}
	select {
	case e := <-w.events.Events:
		if !strings.Contains(e, v1alpha1.ReasonTargetReadsOff) {
			t.Errorf("event %q, want %s", e, v1alpha1.ReasonTargetReadsOff)
		}
	default:
		t.Error("no Event")
	}
}

// TestMarkClearedOnceTheDeviceReadsOn: once the node's device reads on (the mapping was
// fixed), the next round removes the mark and the metric.
func TestMarkClearedOnceTheDeviceReadsOn(t *testing.T) {
	w := newWorld(t)
	w.round(t)
	w.life["node-1"] = t0.Add(time.Minute)
	w.m.checkPending(context.Background())
	if w.markOf(t, "node-1") == "" {
		t.Fatal("not marked")
	}
	w.reads.state["node-1"], w.reads.at = plugin.StateOn, t0.Add(2*time.Minute)
	w.round(t)
	if m := w.markOf(t, "node-1"); m != "" {
		t.Errorf("mark %q left after the device read on", m)
	}
	if n := testutil.CollectAndCount(w.m.off.gauge); n != 0 {
		t.Errorf("kubefence_target_reads_off has %d series after the device read on, want none", n)
	}
}

// TestTargetUpMetric: kubefence_target_up says, per node and agent, whether the device
// answered the last round; a node gone from the cluster drops out.
func TestTargetUpMetric(t *testing.T) {
	w := newWorld(t)
	w.reads.errs = map[string]error{"node-2": errors.New("dial 10.0.0.2:623: i/o timeout")}
	w.round(t)
	const head = "# HELP kubefence_target_up 1 when the node's first-level fence device answered the last Status check, " +
		"0 when it failed (see the controller log for the error); read at start and every --target-check-interval.\n" +
		"# TYPE kubefence_target_up gauge\n"
	want := head +
		`kubefence_target_up{agent="ipmi",node="node-1"} 1` + "\n" +
		`kubefence_target_up{agent="ipmi",node="node-2"} 0` + "\n"
	if err := testutil.CollectAndCompare(w.m.up, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// node-2's device answers again; node-1 leaves the cluster.
	w.reads.errs = nil
	if err := w.idx.Delete(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}); err != nil {
		t.Fatal(err)
	}
	w.round(t)
	want = head + `kubefence_target_up{agent="ipmi",node="node-2"} 1` + "\n"
	if err := testutil.CollectAndCompare(w.m.up, strings.NewReader(want)); err != nil {
		t.Errorf("after node-1 left: %v", err)
	}
}

// TestExcludedAndMaintenanceNodesNotProbed: a round reads no device of a node its policy
// excludes or that is under maintenance, so neither raises KubefenceTargetDown; a cordon
// alone counts only under the policy's cordoned: Always.
func TestExcludedAndMaintenanceNodesNotProbed(t *testing.T) {
	node := func(name string, change func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if change != nil {
			change(n)
		}
		return n
	}
	nodes := []*corev1.Node{
		node("plain", nil),
		node("excluded", func(n *corev1.Node) { n.Labels[v1alpha1.DefaultExcludeLabel] = "true" }),
		node("scaled-down", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: maintenance.AutoscalerTaint, Effect: corev1.TaintEffectNoSchedule}}
		}),
		node("medik8s-excluded", func(n *corev1.Node) { n.Labels[maintenance.ExcludeLabel] = "" }),
		node("cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
	}
	for rule, want := range map[v1alpha1.CordonRule][]string{
		v1alpha1.CordonWhenDrained: {"plain", "cordoned"},
		v1alpha1.CordonAlways:      {"plain"},
	} {
		pol := v1alpha1.Policy{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{"ipmi"}}},
			Maintenance: v1alpha1.Maintenance{Cordoned: rule}}
		pol.Default()
		m := &Monitor{Policies: []v1alpha1.Policy{pol}}
		var got []string
		for _, n := range m.probed(nodes) {
			got = append(got, n.Name)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("cordoned %s: probed %v, want %v", rule, got, want)
		}
	}
}
