package sim

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencer"
)

// TestStandbyJudgesOnItsOwnEvidence: a node dies and the leader is SIGKILLed a moment
// later, before it could judge the node (as when the leader ran on that node). The
// standby watched the node's Lease go silent with the API server in reach all along, so
// on takeover it counts that silence, its own, instead of starting a fresh one: the
// incident's evidence starts before the takeover, at the last renewal the standby saw.
// Everything else holds as for any takeover: one incident, released only after the
// verified fence, no other node touched.
func TestStandbyJudgesOnItsOwnEvidence(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h, leader, _, victim, rec := haHarness(t, ctx)
	old := controllerLease(t, ctx, h)

	h.Cluster.Node(victim).Crash()
	crashed := time.Now()
	if err := leader.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-leader.Done()
	nf := waitReleased(t, ctx, h, victim)
	lease := takenOver(t, ctx, h, old)
	if nf.Status.Epoch < 2 {
		t.Fatalf("incident opened at epoch %d, want one opened by the new leader", nf.Status.Epoch)
	}
	acquired := lease.Spec.AcquireTime.Time
	evidence := fencer.StepTime(&nf, v1alpha1.StepEvidenceStarted)
	detected := fencer.StepTime(&nf, v1alpha1.StepDetected)
	t.Logf("crash at 0; leader killed; standby acquired the Lease at +%.2fs; evidence from +%.2fs; detected at +%.2fs",
		acquired.Sub(crashed).Seconds(), evidence.Sub(crashed).Seconds(), detected.Sub(crashed).Seconds())
	if evidence.IsZero() || !evidence.Before(acquired) {
		t.Errorf("the incident's evidence starts at %s, not before the takeover at %s: the standby's own watch of the Lease was thrown away",
			evidence, acquired)
	}
	checkResumed(t, ctx, h, rec, victim, nf, *lease.Spec.HolderIdentity)
}
