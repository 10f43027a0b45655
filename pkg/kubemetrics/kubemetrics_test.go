package kubemetrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
)

// TestClientGoMetricsOnTheRegistry: once registered, a named workqueue, a REST client's
// requests and a leader election show on the registry under Kubernetes' metric names.
func TestClientGoMetricsOnTheRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := Register(reg); err != nil {
		t.Errorf("a second Register on the same registry: %v", err)
	}

	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "test-queue"})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	item, _ := q.Get()
	q.AddRateLimited(item)
	q.Done(item)

	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"NodeList","apiVersion":"v1","items":[]}`))
	}))
	defer api.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}

	elect(t)

	host := strings.TrimPrefix(api.URL, "http://")
	for name, tc := range map[string]struct {
		got  prometheus.Collector
		want float64
	}{
		"workqueue_depth":         {queueDepth.WithLabelValues("test-queue"), 1}, // b; a waits out its rate limit
		"workqueue_adds_total":    {queueAdds.WithLabelValues("test-queue"), 2},
		"workqueue_retries_total": {queueRetries.WithLabelValues("test-queue"), 1},
	} {
		if got := testutil.ToFloat64(tc.got); got < tc.want {
			t.Errorf("%s{name=test-queue} = %v, want at least %v", name, got, tc.want)
		}
	}
	if got := testutil.ToFloat64(requestResults.WithLabelValues("200", "GET", host)); got != 1 {
		t.Errorf(`rest_client_requests_total{code="200",method="GET",host=%q} = %v, want 1`, host, got)
	}
	names, err := testutil.GatherAndCount(reg, "rest_client_request_duration_seconds", "rest_client_rate_limiter_duration_seconds",
		"workqueue_queue_duration_seconds", "workqueue_work_duration_seconds", "leader_election_master_status")
	if err != nil || names < 5 {
		t.Errorf("gathered %d of the latency and leader series (%v), want each", names, err)
	}
	if got := testutil.ToFloat64(leaderStatus.WithLabelValues("test-lease")); got != 1 {
		t.Errorf(`leader_election_master_status{name="test-lease"} = %v, want 1 while leading`, got)
	}
}

// elect runs a leader election on a fake clientset until it leads.
func elect(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "test-lease"},
		Client: fake.NewClientset().CoordinationV1(), LockConfig: resourcelock.ResourceLockConfig{Identity: "me"}}
	led := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{Lock: lock, Name: "test-lease",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) { close(led) }, OnStoppedLeading: func() {}}})
	if err != nil {
		t.Fatal(err)
	}
	go le.Run(ctx)
	select {
	case <-led:
	case <-ctx.Done():
		t.Fatal("never led")
	}
}
