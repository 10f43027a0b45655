package incidents

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestHistoryRetention: ended incidents the controller opened go once they are beyond the
// newest KeepPerNode of their node or older than MaxAge; the newest ended one of a node,
// open incidents and a person's NodeFences always stay.
func TestHistoryRetention(t *testing.T) {
	now := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	incident := func(name, node string, age time.Duration, phase v1alpha1.Phase, by string) *v1alpha1.NodeFence {
		return &v1alpha1.NodeFence{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "NodeFence"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1alpha1.NodeFenceSpec{NodeName: node, RequestedBy: by},
			Status: v1alpha1.NodeFenceStatus{Phase: phase,
				Timeline: []v1alpha1.Step{{Time: metav1.NewMicroTime(now.Add(-age)), Type: v1alpha1.StepDetected}}},
		}
	}
	var all []*v1alpha1.NodeFence
	for i := range 15 { // node-1: fifteen recovered incidents, an hour apart; the newest is a-14
		all = append(all, incident(fmt.Sprintf("a-%02d", i), "node-1", time.Duration(15-i)*time.Hour, v1alpha1.PhaseRecovered, v1alpha1.RequestedByController))
	}
	all = append(all,
		incident("a-open", "node-1", 400*time.Hour, v1alpha1.PhaseFencing, v1alpha1.RequestedByController),
		incident("a-person", "node-1", 500*time.Hour, v1alpha1.PhaseRecovered, "alice"),
		incident("b-old-newest", "node-2", 800*time.Hour, v1alpha1.PhaseFailed, v1alpha1.RequestedByController),
		incident("b-older", "node-2", 900*time.Hour, v1alpha1.PhaseRecovered, v1alpha1.RequestedByController),
		incident("b-young", "node-2", 900*time.Hour-time.Minute, v1alpha1.PhaseCancelled, "bob"),
	)
	cfg := &v1alpha1.Config{}
	cfg.Default()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, nodeFenceIndexers())
	for _, nf := range all {
		if err := idx.Add(nf.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	r := &Retention{Store: &Store{indexer: idx}, History: cfg.History}
	var got []string
	for _, nf := range r.expired(now) {
		got = append(got, nf.Name)
	}
	slices.Sort(got)
	want := []string{"a-00", "a-01", "a-02", "a-03", "a-04", "b-older"}
	if !slices.Equal(got, want) {
		t.Errorf("deleted %v, want %v", got, want)
	}
}
