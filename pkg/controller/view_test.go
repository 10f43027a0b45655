package controller

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/policy"
)

// TestDryRunSeenIsForgotten: dry run reports a node once per unhealthy episode, and
// forgets the episode once the node is healthy again or deleted, so that what it
// remembers stays bounded by the nodes unhealthy now.
func TestDryRunSeenIsForgotten(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	for name, tc := range map[string]struct {
		// end ends the node's unhealthy episode.
		end func(t *testing.T, c *Controller, node *corev1.Node, lease *coordinationv1.Lease)
	}{
		"healthy again": {func(t *testing.T, c *Controller, _ *corev1.Node, lease *coordinationv1.Lease) {
			renewed := lease.DeepCopy()
			rt := metav1.NewMicroTime(now)
			renewed.Spec.RenewTime = &rt
			c.detector.ObserveLease(renewed, now)
		}},
		"node deleted": {func(t *testing.T, c *Controller, node *corev1.Node, _ *coordinationv1.Lease) {
			if err := c.opts.Caches.Kube.Core().V1().Nodes().Informer().GetIndexer().Delete(node); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := testController(t, &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}})
			c.now = func() time.Time { return now }
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
			if err := c.opts.Caches.Kube.Core().V1().Nodes().Informer().GetIndexer().Add(node); err != nil {
				t.Fatal(err)
			}
			rt := metav1.NewMicroTime(t0)
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Namespace: NodeLeaseNamespace},
				Spec: coordinationv1.LeaseSpec{RenewTime: &rt}}
			c.detector.ObserveLease(lease, t0)
			obs := c.detector.Assess(node, now)
			if obs.Health != detector.Unhealthy {
				t.Fatalf("setup: node is %s: %s", obs.Health, obs.Evidence)
			}
			for range 2 {
				c.wouldFence(ctx, node, obs, policy.Decision{Verdict: policy.WouldFence, Message: "within budget"})
			}
			if got := testutil.ToFloat64(c.metrics.WouldFence); got != 1 {
				t.Fatalf("one episode reported %v times, want once", got)
			}
			tc.end(t, c, node, lease)
			if _, err := c.sync(ctx, node.Name); err != nil {
				t.Fatalf("sync: %v", err)
			}
			if n := c.decide.dryRunReports.Nodes(); n != 0 {
				t.Errorf("dry run still remembers %d nodes after the episode ended", n)
			}
		})
	}
}
