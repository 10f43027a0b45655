package fencecall

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin/plugintest"
)

// BenchmarkTargetCheck: the check that an agent's target is one node's, before a call for
// one node of a 5,000-node cluster each with its own BMC: by reading every node
// (targetOwners, as CheckTargets does) and by the node cache's index (the controller).
//
//	go test ./pkg/fencecall -run '^$' -bench TargetCheck -benchmem
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
	a, err := New(plugintest.One{A: &targetEcho{sent: map[string]int{}}}, cfg, fake.NewClientset(), NewMetrics(nil, nil), time.Now,
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
