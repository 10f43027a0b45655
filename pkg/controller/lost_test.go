package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestFixtureFailedSaveAfterFenceCall: the write that follows an acknowledged Fence call
// fails, so the incident's record still says the call is in flight. The BMC acts 3 s
// after it acknowledges. The next sync reads the target back before anything else and
// sends no second off, which would land on the node's next boot once the first had
// verified and released it.
func TestFixtureFailedSaveAfterFenceCall(t *testing.T) {
	f := newFixture(t, fixtureConfig(), threeNodes()...)
	f.bmc.ActsAfter, f.bmc.Clock = 3*time.Second, func() time.Time { return f.clock.Now() }
	fenced, failed := false, false
	f.bmc.FenceFunc = func(context.Context) error { fenced = true; return nil }
	f.dyn.PrependReactor("update", "nodefences", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && fenced && !failed {
			failed = true
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	if _, err := f.c.sync(context.Background(), "node-1"); err == nil || !failed {
		t.Fatalf("first sync: err %v (save failed: %t), want the failed save's error", err, failed)
	}
	if calls := f.bmc.TakeCalls(); len(calls) == 0 || calls[0] != "Fence bmc-node-1" {
		t.Fatalf("first sync's calls %v, want the Fence call first", calls)
	}
	var calls []string
	for i := 0; i < 100 && f.incident("node-1").Status.Phase != v1alpha1.PhaseRemediated; i++ {
		f.clock.Step(500 * time.Millisecond)
		f.sync("node-1")
		calls = append(calls, f.bmc.TakeCalls()...)
	}
	if nf := f.incident("node-1"); nf.Status.Phase != v1alpha1.PhaseRemediated {
		t.Fatalf("phase %s (%s), want Remediated", nf.Status.Phase, nf.Status.Message)
	}
	if len(calls) == 0 || calls[0] != "Status bmc-node-1" {
		t.Errorf("calls after the failed save %v, want a Status read first", calls)
	}
	if n := strings.Count(strings.Join(calls, ","), "Fence "); n != 0 {
		t.Errorf("%d more offs sent after the failed save (%v), want none", n, calls)
	}
}
