package sim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/detector"
)

// Detection thresholds for the detector tests: kubelets renew every second, so 6s is
// six missed renewals, far below kube-controller-manager's default 50s grace period.
var e2eThresholds = detector.Thresholds{LeaseStaleAfter: 6 * time.Second, NotReadyAfter: 6 * time.Second,
	FlapWindow: 5 * time.Minute, FlapThreshold: 3}

// watchedDetector is a detector fed by real informers, as the controller feeds it.
type watchedDetector struct {
	d     *detector.Detector
	nodes listersv1.NodeLister
	mu    sync.Mutex
	worst map[string]detector.Health // the worst health each node was ever assessed at
}

func startDetector(t *testing.T, ctx context.Context, c *Cluster) *watchedDetector {
	t.Helper()
	w := &watchedDetector{d: detector.New(e2eThresholds), worst: map[string]detector.Health{}}
	nodeInf := informers.NewSharedInformerFactory(c.Client, 0)
	leaseInf := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(NodeLeaseNamespace))
	w.nodes = nodeInf.Core().V1().Nodes().Lister()
	leases := leaseInf.Coordination().V1().Leases().Informer()
	observe := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			w.d.ObserveLease(l, time.Now())
		}
	}
	if _, err := leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: observe, UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		t.Fatalf("lease handler: %v", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	nodeInf.Start(ctx.Done())
	leaseInf.Start(ctx.Done())
	t.Cleanup(func() { cancel(); nodeInf.Shutdown(); leaseInf.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), nodeInf.Core().V1().Nodes().Informer().HasSynced, leases.HasSynced) {
		t.Fatal("informers did not sync")
	}
	return w
}

// assess is the detector's verdict on node now, remembering the worst one seen.
func (w *watchedDetector) assess(node string) (detector.Observation, error) {
	n, err := w.nodes.Get(node)
	if err != nil {
		return detector.Observation{}, err
	}
	obs := w.d.Assess(n, time.Now())
	w.mu.Lock()
	if obs.Health == detector.Unhealthy || w.worst[node] == "" {
		w.worst[node] = obs.Health
	}
	w.mu.Unlock()
	return obs, nil
}

func (w *watchedDetector) everUnhealthy(node string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.worst[node] == detector.Unhealthy
}

// until polls node's assessment until it has one of the healths.
func (w *watchedDetector) until(t *testing.T, node string, timeout time.Duration, want ...detector.Health) detector.Observation {
	t.Helper()
	var last detector.Observation
	eventually(t, timeout, fmt.Sprintf("node %s %v", node, want), func() (bool, error) {
		obs, err := w.assess(node)
		last = obs
		for _, h := range want {
			if err == nil && obs.Health == h {
				return true, nil
			}
		}
		return false, fmt.Errorf("%s: %s (%v)", obs.Health, obs.Evidence, err)
	})
	return last
}

func TestDetectorOnRealAPIServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// kube-controller-manager keeps its default --node-monitor-grace-period (50s).
	c := startCluster(t, ctx, Options{Dir: t.TempDir(), Logf: t.Logf, LeaseRenewInterval: time.Second,
		StatusUpdateInterval: time.Second,
		Nodes:                []NodeSpec{{Name: "dead"}, {Name: "blip"}, {Name: "flappy"}, {Name: "steady"}}})
	w := startDetector(t, ctx, c)
	for _, n := range c.Nodes() {
		w.until(t, n.Name(), 30*time.Second, detector.Healthy)
	}

	t.Run("stale lease is unhealthy before the node controller marks it Unknown", func(t *testing.T) {
		crashed := time.Now()
		c.Node("dead").Crash()
		obs := w.until(t, "dead", 30*time.Second, detector.Unhealthy)
		took := time.Since(crashed)
		node, err := c.Client.CoreV1().Nodes().Get(ctx, "dead", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get node: %v", err)
		}
		if st := readyStatus(node); st != corev1.ConditionTrue {
			t.Errorf("Ready is %s when the detector reported unhealthy; want True, still before the 50s grace", st)
		}
		// The last renewal may have come up to one interval before the crash.
		if took < e2eThresholds.LeaseStaleAfter-time.Second {
			t.Errorf("unhealthy after %s, before the %s threshold", took, e2eThresholds.LeaseStaleAfter)
		}
		if obs.Reason != detector.ReasonLeaseStale || !strings.Contains(obs.Evidence, "lease last renewed") {
			t.Errorf("reason %s, evidence %q", obs.Reason, obs.Evidence)
		}
		t.Logf("unhealthy %s after the crash with Ready still True: %s", took.Round(time.Millisecond), obs.Evidence)
	})

	t.Run("a node that recovers in time is never unhealthy", func(t *testing.T) {
		c.Node("blip").Crash()
		w.until(t, "blip", 30*time.Second, detector.Suspect)
		c.Node("blip").Restart()
		obs := w.until(t, "blip", 30*time.Second, detector.Healthy)
		if w.everUnhealthy("blip") {
			t.Errorf("blip was assessed unhealthy during a short outage")
		}
		if !obs.Reboot.Recent || obs.Reboot.PreviousBootID == "" {
			// The restart posts the new boot ID; the lease may come back first.
			obs = w.untilRebooted(t, "blip")
		}
		t.Logf("blip recovered: %s", obs.Evidence)
	})

	t.Run("a flapping node is reported flapping", func(t *testing.T) {
		n := c.Node("flappy")
		for i := range e2eThresholds.FlapThreshold {
			n.Crash()
			w.until(t, "flappy", 30*time.Second, detector.Suspect, detector.Flapping)
			n.Restart()
			if i < e2eThresholds.FlapThreshold-1 {
				w.until(t, "flappy", 30*time.Second, detector.Healthy)
			}
		}
		obs := w.until(t, "flappy", 30*time.Second, detector.Flapping)
		if obs.Reason != detector.ReasonFlapping || obs.Damping.Flaps != e2eThresholds.FlapThreshold ||
			!strings.Contains(obs.Evidence, "recovered 3 times") {
			t.Errorf("flapping observation: reason %s, flaps %d, evidence %q", obs.Reason, obs.Damping.Flaps, obs.Evidence)
		}
		if w.everUnhealthy("flappy") {
			t.Errorf("flappy was assessed unhealthy")
		}
		// Dead for good now: still flapping, not unhealthy, within the window.
		n.Crash()
		obs = w.until(t, "flappy", 30*time.Second, detector.Flapping)
		eventually(t, 30*time.Second, "flappy's evidence says unhealthy", func() (bool, error) {
			var err error
			obs, err = w.assess("flappy")
			return obs.Health == detector.Flapping && obs.Damping.Undamped == detector.Unhealthy, err
		})
		t.Logf("flappy: %s", obs.Evidence)
	})

	if obs, _ := w.assess("steady"); obs.Health != detector.Healthy || obs.Damping.Flaps != 0 {
		t.Errorf("steady: %s, %d flaps: %s", obs.Health, obs.Damping.Flaps, obs.Evidence)
	}
}

func (w *watchedDetector) untilRebooted(t *testing.T, node string) detector.Observation {
	t.Helper()
	var obs detector.Observation
	eventually(t, 30*time.Second, node+" reboot recorded", func() (bool, error) {
		var err error
		obs, err = w.assess(node)
		return obs.Reboot.Recent && obs.Reboot.PreviousBootID != "", err
	})
	return obs
}

func readyStatus(node *corev1.Node) corev1.ConditionStatus {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}
