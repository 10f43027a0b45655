package fencecall

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin/plugintest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// targetEcho is an agent whose Status reads "on" and records the targets it was sent.
type targetEcho struct {
	mu   sync.Mutex
	sent map[string]int
}

func (a *targetEcho) Describe(context.Context) (plugin.Description, error) {
	return plugin.Description{Name: "echo"}, nil
}
func (a *targetEcho) Validate(context.Context, map[string]string) error { return nil }
func (a *targetEcho) Fence(context.Context, plugin.Request, plugin.Action) (plugin.Result, error) {
	return plugin.Result{}, fmt.Errorf("fence: not expected here")
}
func (a *targetEcho) Unfence(context.Context, plugin.Request) (plugin.Result, error) {
	return plugin.Result{}, fmt.Errorf("unfence: not expected here")
}
func (a *targetEcho) Status(_ context.Context, req plugin.Request) (plugin.Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sent[req.Target]++
	return plugin.Result{State: plugin.StateOn}, nil
}

// rackNodes are n nodes, node-0000 on, ten to a rack, each with its slot annotated.
func rackNodes(n int) []*corev1.Node {
	nodes := make([]*corev1.Node, n)
	for i := range nodes {
		nodes[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%04d", i),
			Labels:      map[string]string{"rack": fmt.Sprint(i / 10)},
			Annotations: map[string]string{"example.com/slot": fmt.Sprint(i % 10)}}}
	}
	return nodes
}

func templateCaller(t *testing.T, agent plugin.Agent, nodes []*corev1.Node, templates ...string) (*Caller, *v1alpha1.Config) {
	t.Helper()
	cfg := &v1alpha1.Config{}
	var names []string
	for i, tmpl := range templates {
		name := fmt.Sprintf("bmc-%d", i)
		names = append(names, name)
		cfg.Agents = append(cfg.Agents, v1alpha1.Agent{Name: name, SHA256: strings.Repeat("0", 64), Target: v1alpha1.TargetSource{Template: tmpl}})
	}
	cfg.Policies = []v1alpha1.Policy{{Name: "all", Levels: []v1alpha1.Level{{Agents: names}}}}
	cfg.Default()
	if errs := cfg.Validate(); len(errs) > 0 {
		t.Fatalf("config: %v", errs)
	}
	a, err := New(plugintest.One{A: agent}, cfg, fake.NewClientset(), NewMetrics(nil, nil), time.Now,
		func() ([]*corev1.Node, error) { return nodes, nil })
	if err != nil {
		t.Fatal(err)
	}
	return a, cfg
}

// TestTargetTemplateAtScale: a naming template maps 1,000 nodes to their BMCs
// without an annotation on each. The target monitor reads all 1,000 through it, each
// node's own address once; a template that drops what sets the nodes apart (the slot)
// maps ten nodes to each address, and every one of them is refused, naming the others.
func TestTargetTemplateAtScale(t *testing.T) {
	const n = 1000
	nodes := rackNodes(n)
	echo := &targetEcho{sent: map[string]int{}}
	a, cfg := templateCaller(t, echo, nodes,
		`10.{{ .Labels.rack }}.0.{{ index .Annotations "example.com/slot" }}`,
		`{{ .Name | trimPrefix "node-" }}-bmc.rack{{ .Labels.rack }}.example.com`,
		`rack{{ .Labels.rack }}-bmc.example.com`)
	checks := a.CheckAll(context.Background(), cfg.Policies, nodes)
	if len(checks) != 3*n {
		t.Fatalf("%d checks, want %d", len(checks), 3*n)
	}
	up, refused := map[string]int{}, 0
	for _, tc := range checks {
		switch {
		case tc.Agent == "bmc-2":
			if tc.Up() || !strings.Contains(tc.Err.Error(), "is also the target of node") || plugin.KindOf(tc.Err) != plugin.KindPermanent {
				t.Fatalf("%s through bmc-2 (target %s shared by a rack): %v, want refused as shared", tc.Node, tc.Target, tc.Err)
			}
			refused++
		case !tc.Up():
			t.Fatalf("%s through %s (target %s): %v", tc.Node, tc.Agent, tc.Target, tc.Err)
		default:
			up[tc.Agent]++
		}
	}
	if up["bmc-0"] != n || up["bmc-1"] != n || refused != n {
		t.Errorf("up %v, refused %d; want %d, %d and %d", up, refused, n, n, n)
	}
	if len(echo.sent) != 2*n {
		t.Errorf("%d distinct targets read, want %d", len(echo.sent), 2*n)
	}
	for target, times := range echo.sent {
		if times != 1 || strings.HasPrefix(target, "rack") {
			t.Errorf("target %s read %d times", target, times)
		}
	}
	for _, want := range []string{"10.99.0.9", "0999-bmc.rack99.example.com", "10.0.0.0"} {
		if echo.sent[want] != 1 {
			t.Errorf("target %s not read", want)
		}
	}
}

// TestSharedTargetRefused: two nodes one agent acts for that map to the same target are
// never acted on through it (a copied annotation would power off the wrong machine); a
// node whose policy uses another agent does not count, since that agent's parameters
// may set the devices apart; a template a node cannot satisfy names the node.
func TestSharedTargetRefused(t *testing.T) {
	node := func(name, bmc string, labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{"bmc": bmc}}}
	}
	a1 := node("node-1", "10.0.0.1", nil)
	a2 := node("node-2", "10.0.0.1", nil)
	other := node("node-3", "10.0.0.3", map[string]string{"dc": "2"})
	otherSame := node("node-4", "10.0.0.3", map[string]string{"dc": "2"})
	cfg := &v1alpha1.Config{
		Agents: []v1alpha1.Agent{{Name: "ipmi", Target: v1alpha1.TargetSource{Annotation: "bmc"}},
			{Name: "ipmi-dc2", Target: v1alpha1.TargetSource{Annotation: "bmc"}},
			{Name: "rack", Target: v1alpha1.TargetSource{Template: "{{ .Labels.rack }}"}}},
		Policies: []v1alpha1.Policy{
			{Name: "dc2", NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"dc": "2"}},
				Levels: []v1alpha1.Level{{Agents: []string{"ipmi-dc2"}}}},
			{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{"ipmi"}}, {Agents: []string{"rack"}}}}},
	}
	cfg.Default()
	nodes := []*corev1.Node{a1, a2, other, otherSame, node("node-5", "10.0.0.3", nil)}
	a, err := New(plugintest.One{A: &targetEcho{sent: map[string]int{}}}, cfg, fake.NewClientset(), NewMetrics(nil, nil), time.Now,
		func() ([]*corev1.Node, error) { return nodes, nil })
	if err != nil {
		t.Fatal(err)
	}
	// The controller finds a target's nodes in its node cache's index; the same answers
	// come from reading every node.
	for _, owned := range []func(agent, target string) ([]string, error){nil, indexedOwners(targetIndexer(t, a, nodes))} {
		a.owned = owned
		sharedTargetCases(t, a, a1, a2, other, nodes[4])
	}
}

// targetIndexer is a node cache of nodes indexed by targetIndex, as the controller's.
func targetIndexer(t testing.TB, a *Caller, nodes []*corev1.Node) cache.Indexer {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{targetIndex: a.targetKeys})
	for _, n := range nodes {
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

func sharedTargetCases(t *testing.T, a *Caller, a1, a2, other, node5 *corev1.Node) {
	t.Helper()
	for _, tc := range []struct {
		agent string
		node  *corev1.Node
		want  string // "" for a target acted on
	}{
		{"ipmi", a1, "agent ipmi: target 10.0.0.1 of node node-1 is also the target of node node-2"},
		{"ipmi", a2, "agent ipmi: target 10.0.0.1 of node node-2 is also the target of node node-1"},
		// node-3 and node-4 share 10.0.0.3 for ipmi-dc2; node-5 has it too, but for ipmi.
		{"ipmi-dc2", other, "is also the target of node node-4;"},
		{"ipmi", node5, ""},
		{"rack", a1, `agent rack: target template on node node-1: template: target:1:10: executing "target" at <.Labels.rack>: map has no entry for key "rack"`},
	} {
		_, _, err := a.request(context.Background(), tc.agent, tc.node, "", "", 1)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s on %s (index %v): %v, want the target acted on", tc.agent, tc.node.Name, a.owned != nil, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || plugin.KindOf(err) != plugin.KindPermanent):
			t.Errorf("%s on %s (index %v): %v, want a Permanent error with %q", tc.agent, tc.node.Name, a.owned != nil, err, tc.want)
		}
	}
}
