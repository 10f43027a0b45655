package sim

import (
	"context"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// BenchmarkCrashAtLeaderStart measures the price of the evidence floor: with
// kubelets renewing every 10s (leaseDurationSeconds 40) and the default 30s threshold, a
// node that crashes as a fresh leader starts is fenced only once the leader has watched
// its Lease for the Lease's duration, while one that crashes a Lease duration after the
// start is fenced on the threshold, as before. Each round starts its own cluster:
//
//	go test ./test/sim -run '^$' -bench CrashAtLeaderStart -benchtime 1x
func BenchmarkCrashAtLeaderStart(b *testing.B) {
	for _, tc := range []struct {
		name  string
		after time.Duration
	}{{"at-start", 0}, {"after-one-lease-duration", 45 * time.Second}} {
		b.Run(tc.name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				total += crashAfterLeaderStart(b, tc.after)
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "crash-to-remediated-s")
		})
	}
}

func crashAfterLeaderStart(b *testing.B, after time.Duration) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h, err := StartHarness(ctx, HarnessOptions{Dir: b.TempDir(), Nodes: 3})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Stop()
	if err := h.Cluster.DeployStatefulSet(ctx, "web", 1); err != nil {
		b.Fatal(err)
	}
	victim, err := nodeOfPod(ctx, h.Cluster, "web-0")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := h.StartController("controller"); err != nil {
		b.Fatal(err)
	}
	if _, err := h.WaitLeader(ctx); err != nil {
		b.Fatal(err)
	}
	if err := sleepUntil(ctx, time.Now().Add(after)); err != nil {
		b.Fatal(err)
	}
	crash := time.Now()
	h.Cluster.Node(victim).Crash()
	var done time.Time
	err = pollUntil(ctx, 200*time.Millisecond, 4*time.Minute, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, h.Cluster, victim)
		if err != nil || len(incs) == 0 {
			return false, nil
		}
		at, ok := stepAt(incs[len(incs)-1], v1alpha1.StepRemediated)
		done = at
		return ok, nil
	})
	if err != nil {
		b.Fatalf("%s never remediated: %v", victim, err)
	}
	return done.Sub(crash)
}
