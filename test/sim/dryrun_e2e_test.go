package sim

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestDryRunTouchesNothing: in shadow mode a dead node is reported with a WouldFence
// event, and nothing is changed: no incident, no BMC action, no pod condition, no taint.
func TestDryRunTouchesNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, func(c *v1alpha1.Config) { c.DryRun = true })
	c := h.Cluster
	victim := deployWeb(t, ctx, c)
	startLeader(t, ctx, h, "controller")
	c.Node(victim).Crash()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ev, err := c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + v1alpha1.ReasonWouldFence})
		return err == nil && len(ev.Items) > 0, nil
	})
	if err != nil {
		t.Fatalf("no WouldFence event for the dead node %s", victim)
	}
	if incs, err := Incidents(ctx, c, ""); err != nil || len(incs) != 0 {
		t.Errorf("dry run opened %d incidents (%v)", len(incs), err)
	}
	if ev, _ := h.BMCs[victim].Events(); len(ev) != 0 {
		t.Errorf("dry run touched the BMC: %+v", ev)
	}
	pod, err := c.Client.CoreV1().Pods(Namespace).Get(ctx, "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(pod.Status.Conditions, func(pc corev1.PodCondition) bool {
		return pc.Type == "fencing.kubefence.io/NodeUnreachable"
	}) {
		t.Errorf("dry run set the NodeUnreachable condition on web-0")
	}
	if got := taintKeys(t, ctx, c, victim); slices.Contains(got, outOfService) || slices.Contains(got, fencedTaint) {
		t.Errorf("dry run tainted %s: %v", victim, got)
	}
}
