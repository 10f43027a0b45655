package controller

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	f.clock.Set(f0.Add(time.Minute))
	for i := stale; i < nodes; i++ {
		f.cache(fixtureLease(fmt.Sprintf("node-%d", i), f.clock.Now().Add(-time.Second)))
	}
	pol := &f.c.cfg.Policies[0]
	for i := range nodes {
		n, err := f.c.caches.nodes.Get(fmt.Sprintf("node-%d", i))
		if err != nil {
			b.Fatal(err)
		}
		f.c.sources().View(pol, n, f.clock.Now())
	}
	b.ResetTimer()
	for b.Loop() {
		cl, err := f.c.sources().Cluster(pol, f.clock.Now())
		if err != nil {
			b.Fatal(err)
		}
		unhealthy := 0
		for _, n := range cl.Nodes {
			if n.Health.Unhealthy {
				unhealthy++
			}
		}
		if len(cl.Nodes) != nodes || unhealthy != stale {
			b.Fatalf("%d nodes in the view, %d unhealthy; want %d and %d", len(cl.Nodes), unhealthy, nodes, stale)
		}
	}
}
