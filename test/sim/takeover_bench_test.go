package sim

import (
	"context"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// BenchmarkTakeover measures, b.N times, how long after the leader is SIGKILLed a
// standby holds the Lease (lease 4s, renew deadline 3s, retry 500ms):
//
//	go test ./test/sim -run '^$' -bench Takeover -benchtime 10x
func BenchmarkTakeover(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	h, err := StartHarness(ctx, HarnessOptions{Dir: b.TempDir(), Nodes: 1, Config: func(c *v1alpha1.Config) {
		c.LeaderElection.LeaseDuration = metav1.Duration{Duration: haLeaseDuration}
		c.LeaderElection.RenewDeadline = metav1.Duration{Duration: haRenewDeadline}
		c.LeaderElection.RetryPeriod = metav1.Duration{Duration: haRetryPeriod}
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Stop()
	leader, err := h.StartController("replica-0")
	if err != nil {
		b.Fatal(err)
	}
	holder, err := h.WaitLeader(ctx)
	if err != nil {
		b.Fatal(err)
	}
	le := h.Config.LeaderElection
	var takeovers []time.Duration
	b.ResetTimer()
	for i := range b.N {
		standby, err := h.StartController("replica-" + string(rune('a'+i%26)))
		if err != nil {
			b.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return containsLog(standby, "Caches synced"), nil
		})
		if err != nil {
			b.Fatal("standby never synced")
		}
		if err := leader.Signal(syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		killed := time.Now()
		<-leader.Done()
		err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := h.Cluster.Client.CoordinationV1().Leases(le.Namespace).Get(ctx, le.Name, metav1.GetOptions{})
			if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == holder {
				return false, nil
			}
			holder = *l.Spec.HolderIdentity
			return true, nil
		})
		if err != nil {
			b.Fatal("no takeover")
		}
		takeovers = append(takeovers, time.Since(killed))
		leader = standby
	}
	b.StopTimer()
	sort.Slice(takeovers, func(i, j int) bool { return takeovers[i] < takeovers[j] })
	b.ReportMetric(takeovers[len(takeovers)/2].Seconds(), "p50-s")
	b.ReportMetric(takeovers[len(takeovers)-1].Seconds(), "max-s")
}

func containsLog(r *Replica, s string) bool { return strings.Contains(r.Log(), s) }
