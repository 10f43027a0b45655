package controller

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// The fence-device check: `fence-controller check` (CheckTargets, PrintTargetChecks)
// and the leader's kubefence_target_up (recordTargets).

// checkConfig reads node BMCs through ipmi at the first level and, should that fail,
// fences through pdu, whose devices the check does not read.
func checkConfig() *v1alpha1.Config {
	cfg := fixtureConfig()
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
	for _, o := range threeNodes() {
		if n, ok := o.(*corev1.Node); ok {
			nodes = append(nodes, n)
		}
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
	agent := &bmc{on: true, status: node2Unreachable}
	nodes := checkNodes()
	checks, err := CheckTargets(context.Background(), checkConfig(), oneAgent{agent}, fake.NewClientset(), nodes)
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
	slices.Sort(agent.calls)
	if want := []string{"Status bmc-node-1", "Status bmc-node-2"}; !slices.Equal(agent.calls, want) {
		t.Errorf("agent calls %v, want %v", agent.calls, want)
	}
}

// TestCheckTargetsRefusesABadTemplate: a target template that does not parse is a
// configuration error reported as such, not three hundred failed checks.
func TestCheckTargetsRefusesABadTemplate(t *testing.T) {
	cfg := fixtureConfig()
	cfg.Agents[0].Target = v1alpha1.TargetSource{Template: "{{ .Labels.rack "}
	checks, err := CheckTargets(context.Background(), cfg, oneAgent{&bmc{}}, fake.NewClientset(), checkNodes())
	if err == nil || !strings.Contains(err.Error(), "agent ipmi: target.template") || checks != nil {
		t.Errorf("checks %v, err %v; want none and the template's error", checks, err)
	}
}

// TestPrintTargetChecks: the check's table, as an operator reads it: one row a device,
// the state or "error" with the reason, the latency to the millisecond.
func TestPrintTargetChecks(t *testing.T) {
	var out bytes.Buffer
	err := PrintTargetChecks(&out, []TargetCheck{
		{Node: "node-1", Agent: "ipmi", Target: "10.0.0.1", State: plugin.StateOn, Latency: 12345678 * time.Nanosecond},
		{Node: "node-2", Agent: "ipmi", Target: "10.0.0.2", Latency: 5 * time.Second,
			Err: errors.New("dial 10.0.0.2:623: i/o timeout")},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "" +
		"NODE    AGENT  TARGET    STATE  LATENCY  ERROR\n" +
		"node-1  ipmi   10.0.0.1  on     12ms     \n" +
		"node-2  ipmi   10.0.0.2  error  5s       dial 10.0.0.2:623: i/o timeout\n"
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestTargetUpMetric: the leader exports one kubefence_target_up per node and
// first-level agent, 1 for a device that answered and 0 for one that did not (the alert
// on a broken BMC); a node gone since the last round loses its series, so an alert
// does not fire for a machine that left the cluster.
func TestTargetUpMetric(t *testing.T) {
	ctx := context.Background()
	cfg := checkConfig()
	nodes := checkNodes()
	f := newFixture(t, cfg, nodes[0], nodes[1], nodes[2])
	f.bmc.status = node2Unreachable
	f.c.recordTargets(ctx, f.c.caller.checkTargets(ctx, cfg.Policies, nodes))
	const head = "# HELP kubefence_target_up 1 when the node's first-level fence device answered the last Status check, " +
		"0 when it failed (see the controller log for the error); read at start and every --target-check-interval.\n" +
		"# TYPE kubefence_target_up gauge\n"
	want := head +
		`kubefence_target_up{agent="ipmi",node="node-1"} 1` + "\n" +
		`kubefence_target_up{agent="ipmi",node="node-2"} 0` + "\n" +
		`kubefence_target_up{agent="ipmi",node="node-3"} 0` + "\n"
	if err := testutil.GatherAndCompare(f.c.Registry(), strings.NewReader(want), "kubefence_target_up"); err != nil {
		t.Error(err)
	}
	// node-2's BMC answers again; node-3 leaves the cluster.
	f.bmc.status = nil
	f.c.recordTargets(ctx, f.c.caller.checkTargets(ctx, cfg.Policies, nodes[:2]))
	want = head +
		`kubefence_target_up{agent="ipmi",node="node-1"} 1` + "\n" +
		`kubefence_target_up{agent="ipmi",node="node-2"} 1` + "\n"
	if err := testutil.GatherAndCompare(f.c.Registry(), strings.NewReader(want), "kubefence_target_up"); err != nil {
		t.Errorf("after node-3 left: %v", err)
	}
}
