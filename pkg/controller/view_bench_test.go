package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// BenchmarkCluster: the policy's view of a 5,000-node cluster, 100 or 1,000 of them
// stale, each node with 10 pods, as every decision takes it. The view must find the
// stale ones unhealthy.
//
//	go test ./pkg/controller -run '^$' -bench Cluster -benchmem
func BenchmarkCluster(b *testing.B) {
	for _, stale := range []int{100, 1000} {
		b.Run(fmt.Sprintf("stale=%d", stale), func(b *testing.B) { benchCluster(b, stale) })
	}
}

func benchCluster(b *testing.B, stale int) {
	const nodes, podsPerNode = 5000, 10
	var objs []runtime.Object
	for i := range nodes {
		n := fmt.Sprintf("node-%d", i)
		renewed := f0.Add(time.Minute)
		if i < stale {
			renewed = f0
		}
		objs = append(objs, fixtureNode(n, "boot-"+n, true), fixtureLease(n, renewed))
		for j := range podsPerNode {
			objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%d", n, j)},
				Spec: corev1.PodSpec{NodeName: n}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
		}
	}
	f := newFixture(b, fixtureConfig(), objs...)
	// The live nodes' Leases were seen renewed a moment ago, and each node was assessed
	// in its own sync since, as in a running controller.
	f.now = f0.Add(time.Minute)
	for i := stale; i < nodes; i++ {
		f.cache(fixtureLease(fmt.Sprintf("node-%d", i), f.now.Add(-time.Second)))
	}
	pol := &f.c.cfg.Policies[0]
	for i := range nodes {
		n, err := f.c.nodes.Get(fmt.Sprintf("node-%d", i))
		if err != nil {
			b.Fatal(err)
		}
		f.c.view(pol, n, f.now)
	}
	b.ResetTimer()
	for b.Loop() {
		cl, err := f.c.cluster(pol, f.now)
		if err != nil {
			b.Fatal(err)
		}
		unhealthy := 0
		for _, n := range cl.Nodes {
			if n.Unhealthy {
				unhealthy++
			}
		}
		if len(cl.Nodes) != nodes || unhealthy != stale {
			b.Fatalf("%d nodes in the view, %d unhealthy; want %d and %d", len(cl.Nodes), unhealthy, nodes, stale)
		}
	}
}

// BenchmarkTargetCheck: the check that an agent's target is one node's, before a call for
// one node of a 5,000-node cluster each with its own BMC: by reading every node
// (targetOwners, as CheckTargets does) and by the node cache's index (the controller).
//
//	go test ./pkg/controller -run '^$' -bench TargetCheck -benchmem
func BenchmarkTargetCheck(b *testing.B) {
	const nodes = 5000
	cfg := &v1alpha1.Config{
		Agents:   []v1alpha1.Agent{{Name: "ipmi", Target: v1alpha1.TargetSource{Annotation: "bmc"}}},
		Policies: []v1alpha1.Policy{{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{"ipmi"}}}}},
	}
	cfg.Default()
	all := make([]*corev1.Node, nodes)
	for i := range all {
		all[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i),
			Annotations: map[string]string{"bmc": fmt.Sprintf("10.0.%d.%d", i/256, i%256)}}}
	}
	a, err := newAgentCaller(oneAgent{&targetEcho{sent: map[string]int{}}}, cfg, fake.NewClientset(), newMetrics(), time.Now,
		func() ([]*corev1.Node, error) { return all, nil })
	if err != nil {
		b.Fatal(err)
	}
	idx := targetIndexer(b, a, all)
	for _, way := range []struct {
		name  string
		owned func(agent, target string) ([]string, error)
	}{{"every-node", nil}, {"index", indexedOwners(idx)}} {
		b.Run(way.name, func(b *testing.B) {
			a.owned = way.owned
			for b.Loop() {
				if _, _, err := a.request(context.Background(), "ipmi", all[nodes/2], "", "", 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
