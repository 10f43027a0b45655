package devicemonitor

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// mapped is a Checker and Mapper: a node's target is its "bmc" annotation, and each
// device has an identity and a power state; it counts the reads by node.
type mapped struct {
	identity map[string]string // by target
	off      map[string]bool   // by target
	reads    []string
}

func (m *mapped) TargetFor(_ string, n *corev1.Node) string { return n.Annotations["bmc"] }

func (m *mapped) CheckAll(_ context.Context, _ []v1alpha1.Policy, nodes []*corev1.Node) []fencecall.TargetCheck {
	var out []fencecall.TargetCheck
	for _, n := range nodes {
		m.reads = append(m.reads, n.Name)
		target := m.TargetFor("ipmi", n)
		tc := fencecall.TargetCheck{Node: n.Name, Agent: "ipmi", Target: target, State: plugin.StateOn, At: t0,
			Identity: m.identity[target], Expect: fencecall.ExpectedIdentity(n, target)}
		if m.off[target] {
			tc.State = plugin.StateOff
		}
		if tc.Identity != tc.Expect {
			tc.State, tc.Err = "", plugin.Errorf(plugin.KindTargetMismatch, "%s is not %s", tc.Identity, tc.Expect)
		}
		out = append(out, tc)
	}
	return out
}

// TestMappingChangeReadsTheDeviceAtOnce: a node whose target annotation is edited after a
// round has its device read at the next look (2 s), not at the next round; a device whose
// identity is not the node's is told (a TargetMismatch Event naming both identities).
// Nodes whose mapping did not change are not read again, and two nodes that report one
// systemUUID are told.
func TestMappingChangeReadsTheDeviceAtOnce(t *testing.T) {
	dev := &mapped{identity: map[string]string{"bmc-1": "uuid-1", "bmc-2": "uuid-2", "spare": "uuid-spare"}, off: map[string]bool{"spare": true}}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for i, name := range []string{"node-1", "node-2"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"bmc": "bmc-" + name[5:]}},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{SystemUUID: []string{"uuid-1", "uuid-2"}[i]}}}
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	events := record.NewFakeRecorder(10)
	m := New(Monitor{Checker: dev, Nodes: corelisters.NewNodeLister(idx), Client: fake.NewClientset(),
		Policies: []v1alpha1.Policy{{Name: "all", Levels: []v1alpha1.Level{{Agents: []string{"ipmi"}}}}},
		LastLife: func(string) time.Time { return t0 }, Confirm: func(context.Context) error { return nil },
		Recorder: events}, prometheus.NewRegistry(), 10*time.Second)
	ctx := context.Background()
	nodes, _ := m.Nodes.List(everything())
	m.record(ctx, m.Checker.CheckAll(ctx, m.Policies, m.probed(nodes)), t0)
	m.remap(ctx, nodes)
	if len(dev.reads) != 2 || len(events.Events) != 0 {
		t.Fatalf("reads %v, %d events after an unchanged look; want the round's 2 and none", dev.reads, len(events.Events))
	}
	for _, edit := range []struct{ to, wantEvent string }{{"spare", "the device reports uuid-spare, the node uuid-1"}, {"bmc-2", "the device reports uuid-2, the node uuid-1"}} {
		n, _ := m.Nodes.Get("node-1")
		n = n.DeepCopy()
		n.Annotations["bmc"] = edit.to
		if err := idx.Update(n); err != nil {
			t.Fatal(err)
		}
		dev.reads = nil
		nodes, _ = m.Nodes.List(everything())
		m.remap(ctx, nodes)
		if !slices.Equal(dev.reads, []string{"node-1"}) {
			t.Fatalf("reads after node-1's mapping named %s: %v, want node-1's at once", edit.to, dev.reads)
		}
		select {
		case e := <-events.Events:
			if !strings.Contains(e, v1alpha1.ReasonTargetMismatch) || !strings.Contains(e, edit.wantEvent) {
				t.Errorf("event %q, want %s: %s", e, v1alpha1.ReasonTargetMismatch, edit.wantEvent)
			}
		default:
			t.Errorf("no TargetMismatch Event for %s", edit.to)
		}
		dev.reads = nil
		if m.remap(ctx, nodes); len(dev.reads) != 0 {
			t.Errorf("read again with no change since: %v", dev.reads)
		}
	}
	n2, _ := m.Nodes.Get("node-2")
	n2 = n2.DeepCopy()
	n2.Status.NodeInfo.SystemUUID = "UUID-1"
	if err := idx.Update(n2); err != nil {
		t.Fatal(err)
	}
	nodes, _ = m.Nodes.List(everything())
	m.tellShared(ctx, nodes)
	if len(events.Events) != 2 || !strings.Contains(<-events.Events, "nodes node-1, node-2 report the same systemUUID uuid-1") {
		t.Errorf("want a SharedSystemUUID Event on each node")
	}
}
