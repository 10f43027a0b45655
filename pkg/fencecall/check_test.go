package fencecall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin/plugintest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// The fence-device check: `fence-controller check` (CheckTargets, PrintTargetChecks).

// ipmiConfig has one agent, ipmi, whose target is the node's "bmc" annotation, and one
// policy over every node.
func ipmiConfig() *v1alpha1.Config {
	cfg := &v1alpha1.Config{
		Agents:   []v1alpha1.Agent{{Name: "ipmi", SHA256: strings.Repeat("0", 64), Target: v1alpha1.TargetSource{Annotation: "bmc"}}},
		Policies: []v1alpha1.Policy{{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{"ipmi"}}}}},
	}
	cfg.Default()
	return cfg
}

// checkConfig reads node BMCs through ipmi at the first level and, should that fail,
// fences through pdu, whose devices the check does not read.
func checkConfig() *v1alpha1.Config {
	cfg := ipmiConfig()
	cfg.Agents = append(cfg.Agents, v1alpha1.Agent{Name: "pdu", SHA256: strings.Repeat("0", 64),
		Target: v1alpha1.TargetSource{Label: "pdu-outlet"}})
	cfg.Policies[0].Levels = append(cfg.Policies[0].Levels, v1alpha1.Level{Agents: []string{"pdu"}})
	cfg.Default()
	return cfg
}

// checkNodes are node-1 to node-3 as the fixture has them, node-3 without a BMC
// annotation.
func checkNodes() []*corev1.Node {
	var nodes []*corev1.Node
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("node-%d", i)
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"bmc": "bmc-" + name}}})
	}
	delete(nodes[2].Annotations, "bmc")
	return nodes
}

// node2Unreachable is a BMC status check that times out on node-2's BMC.
func node2Unreachable(target string) error {
	if target == "bmc-node-2" {
		return plugin.Errorf(plugin.KindTargetUnreachable, "dial 10.0.0.2:623: i/o timeout")
	}
	return nil
}

// TestCheckTargets: the check reads each node's first-level device once and reports,
// node by node, what it read or why it could not: a BMC that does not answer and a node
// whose target cannot be named both show up before the day that node dies. Only the
// first level is read: the check must not poll every device of every level.
func TestCheckTargets(t *testing.T) {
	agent := &plugintest.Machine{On: true, StatusFunc: node2Unreachable}
	nodes := checkNodes()
	checks, err := CheckTargets(context.Background(), checkConfig(), plugintest.One{A: agent}, fake.NewClientset(), nodes)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		node, agent, target string
		state               plugin.PowerState
		err                 string
	}
	want := []row{
		{"node-1", "ipmi", "bmc-node-1", plugin.StateOn, ""},
		{"node-2", "ipmi", "bmc-node-2", "", "TargetUnreachable: dial 10.0.0.2:623: i/o timeout"},
		{"node-3", "ipmi", "(none: Permanent: agent ipmi: node node-3 has no annotation bmc to name its target)", "",
			"Permanent: agent ipmi: node node-3 has no annotation bmc to name its target"},
	}
	if len(checks) != len(want) {
		t.Fatalf("%d checks, want %d: %+v", len(checks), len(want), checks)
	}
	for i, tc := range checks {
		got := row{tc.Node, tc.Agent, tc.Target, tc.State, ""}
		if tc.Err != nil {
			got.err = tc.Err.Error()
		}
		if got != want[i] || tc.Up() != (want[i].err == "") {
			t.Errorf("check %d: %+v (up %v), want %+v", i, got, tc.Up(), want[i])
		}
	}
	calls := agent.TakeCalls()
	slices.Sort(calls)
	if want := []string{"Status bmc-node-1", "Status bmc-node-2"}; !slices.Equal(calls, want) {
		t.Errorf("agent calls %v, want %v", calls, want)
	}
}

// TestCheckTargetsRefusesABadTemplate: a target template that does not parse is a
// configuration error reported as such, not three hundred failed checks.
func TestCheckTargetsRefusesABadTemplate(t *testing.T) {
	cfg := ipmiConfig()
	cfg.Agents[0].Target = v1alpha1.TargetSource{Template: "{{ .Labels.rack "}
	checks, err := CheckTargets(context.Background(), cfg, plugintest.One{A: &plugintest.Machine{}}, fake.NewClientset(), checkNodes())
	if err == nil || !strings.Contains(err.Error(), "agent ipmi: target.template") || checks != nil {
		t.Errorf("checks %v, err %v; want none and the template's error", checks, err)
	}
}

// TestPrintTargetChecks: the check's table, as an operator reads it: one row a device,
// the state or "error" with the reason, the device's identity against the node's, the
// latency to the millisecond.
func TestPrintTargetChecks(t *testing.T) {
	var out bytes.Buffer
	err := PrintTargetChecks(&out, []TargetCheck{
		{Node: "node-1", Agent: "ipmi", Target: "10.0.0.1", State: plugin.StateOn, Latency: 12345678 * time.Nanosecond,
			Identity: "a0", Expect: "A0"},
		{Node: "node-2", Agent: "ipmi", Target: "10.0.0.2", Latency: 5 * time.Second,
			Err: errors.New("dial 10.0.0.2:623: i/o timeout")},
		{Node: "node-3", Agent: "ipmi", Target: "10.0.0.9", Latency: time.Second, Identity: "b9", Expect: "c3",
			Err: plugin.Errorf(plugin.KindTargetMismatch, "b9 is not c3")},
		{Node: "node-4", Agent: "ipmi", Target: "10.0.0.4", State: plugin.StateOn, Latency: time.Second, Identity: "d4"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "" +
		"NODE    AGENT  TARGET    STATE  IDENTITY                             LATENCY  ERROR\n" +
		"node-1  ipmi   10.0.0.1  on     a0 (matches the node's)              12ms     \n" +
		"node-2  ipmi   10.0.0.2  error  not checked                          5s       dial 10.0.0.2:623: i/o timeout\n" +
		"node-3  ipmi   10.0.0.9  error  MISMATCH: device b9, node c3         1s       TargetMismatch: b9 is not c3\n" +
		"node-4  ipmi   10.0.0.4  on     d4 (node reports none: not checked)  1s       \n"
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestExpectedIdentity: a BMC target is compared with the node's systemUUID, a cloud
// target with the instance ID that ends its providerID.
func TestExpectedIdentity(t *testing.T) {
	node := &corev1.Node{Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/i-0a1b2c3d4e5f60718"},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{SystemUUID: " EC2A0A0A-0000-1111-2222-333344445555 "}}}
	for target, want := range map[string]string{
		"10.0.0.7:623":                           "EC2A0A0A-0000-1111-2222-333344445555",
		"https://bmc-7.example":                  "EC2A0A0A-0000-1111-2222-333344445555",
		"aws:///us-east-1a/i-0a1b2c3d4e5f60718":  "i-0a1b2c3d4e5f60718",
		"openstack:///5f2c2d9e-9d0b-4f3a-8a3e-1": "i-0a1b2c3d4e5f60718",
	} {
		if got := ExpectedIdentity(node, target); got != want {
			t.Errorf("ExpectedIdentity(%s) = %q, want %q", target, got, want)
		}
	}
}

// TestSharedSystemUUIDs: cloned VMs that report one systemUUID are named, case apart.
func TestSharedSystemUUIDs(t *testing.T) {
	mk := func(name, id string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{SystemUUID: id}}}
	}
	got := SharedSystemUUIDs([]*corev1.Node{mk("b", "AA-1"), mk("a", "aa-1"), mk("c", "bb-2"), mk("d", "")})
	if len(got) != 1 || !slices.Equal(got["aa-1"], []string{"a", "b"}) {
		t.Errorf("shared = %v, want aa-1: [a b]", got)
	}
	checks := []TargetCheck{{Node: "a", Expect: "AA-1"}, {Node: "b", Expect: "aa-1"}, {Node: "c", Expect: "bb-2"}}
	noteShared(checks, []*corev1.Node{mk("b", "AA-1"), mk("a", "aa-1"), mk("c", "bb-2"), mk("d", "")})
	var out bytes.Buffer
	if err := PrintTargetChecks(&out, checks); err != nil || !strings.Contains(out.String(), "WARNING: node a reports the same systemUUID AA-1 as b") ||
		!strings.Contains(out.String(), "node b reports the same systemUUID aa-1 as a") || strings.Contains(out.String(), "node c reports") {
		t.Errorf("printed %q, %v", out.String(), err)
	}
}
