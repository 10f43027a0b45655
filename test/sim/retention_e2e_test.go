package sim

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestHistoryKeepsNewestTen: fifteen ended incidents of one node, opened by the
// controller, and one a person created; the leader's retention pass keeps the newest ten
// of the controller's and the person's.
func TestHistoryKeepsNewestTen(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, nil)
	dyn, err := dynamicClient(h.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	nodefences := dyn.Resource(v1alpha1.NodeFenceResource)
	t0 := time.Now().Add(-24 * time.Hour)
	ended := func(name, by string, opened time.Time) {
		u := nodeFenceRequest(name, "node-1", by, false)
		created, err := nodefences.Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(created.Object, string(v1alpha1.PhaseRecovered), "status", "phase")
		_ = unstructured.SetNestedSlice(created.Object, []any{map[string]any{
			"time": opened.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), "type": v1alpha1.StepDetected}}, "status", "timeline")
		if _, err := nodefences.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for i := range 15 {
		name := fmt.Sprintf("node-1-old-%02d", i)
		ended(name, "controller", t0.Add(time.Duration(i)*time.Minute))
		if i >= 5 {
			want = append(want, name)
		}
	}
	ended("node-1-by-hand", "alice", t0.Add(-time.Hour))
	want = append(want, "node-1-by-hand")
	slices.Sort(want)
	startLeader(t, ctx, h, "controller")
	var names []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, h.Cluster, "node-1")
		if err != nil {
			return false, nil
		}
		names = names[:0]
		for _, nf := range incs {
			names = append(names, nf.Name)
		}
		slices.Sort(names)
		return len(names) <= len(want), nil
	})
	if err != nil || !slices.Equal(names, want) {
		t.Fatalf("after the retention pass: %v (%v); want %v", names, err, want)
	}
	t.Logf("kept %d of 16: %v", len(names), names)
}
