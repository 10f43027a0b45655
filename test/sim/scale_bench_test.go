package sim

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// Kubelet's defaults: a node Lease renewed every 10s, 40s long. KUBEFENCE_SCALE_RENEW_S
// renews less often (the Lease four times as long), for a machine that cannot take the
// writes of 5,000 kubelets next to everything else.
var (
	scaleRenewEvery   = time.Duration(envInt("KUBEFENCE_SCALE_RENEW_S", 10)) * time.Second
	scaleLeaseSeconds = int32(4 * scaleRenewEvery / time.Second)
)

// BenchmarkControllerScale: the fence-controller binary watches a cluster of N nodes on
// the real API server, in dry run, with its default thresholds. The nodes' Leases are
// renewed by the benchmark every 10s (kubelet's default), through the API server, as
// Lease updates the controller's informers see: N simulated kubelets (a process each,
// with pods) do not fit on this machine at 5,000, and the controller reads nothing of a
// node but its object and its Lease. Then 2% of the nodes (at least 10) stop renewing at
// once, and the controller's "would fence" decision for each is timed.
//
// Reported: the controller's RSS and Go heap in use (from its own /metrics) after its
// caches synced, its CPU per second over 30s of quiet, the detector's lag (decision
// time minus the moment the node's Lease crossed the threshold, or the evidence floor the
// detector applied when that was longer; p99 and max), and from
// the process start to leading and to its first decision (a node dead before it started;
// the evidence floor keeps that at least one threshold after leading). renew-gap-max-ms
// is the longest any live node went between two renewals: the figures are only valid
// while it stays under the threshold, and a decision about a node that never stopped
// renewing fails the benchmark.
//
//	go test ./test/sim -run '^$' -bench 'ControllerScale/nodes=(100|5000)$' -benchtime 1x -timeout 60m
func BenchmarkControllerScale(b *testing.B) {
	for _, nodes := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { controllerScale(b, nodes) })
	}
}

func controllerScale(b *testing.B, nodes int) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	all := intstr.FromString("100%")
	h, err := StartHarness(ctx, HarnessOptions{Dir: b.TempDir(), Nodes: 3, Config: func(cfg *v1alpha1.Config) {
		cfg.DryRun = true
		cfg.Detection.ExpectedRenewInterval = metav1.Duration{Duration: scaleRenewEvery}
		cfg.Policies[0].Budget = v1alpha1.Budget{MaxConcurrent: int32(nodes), MaxUnhealthy: &all}
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Stop() })
	c := h.Cluster
	threshold := v1alpha1.DefaultLeaseStaleAfter
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("scale-%d", i)
	}
	// One node dead before the controller starts: its first decision.
	const dead = "scale-dead"
	long := time.Now().Add(-time.Hour)
	if err := forEach(ctx, nodes+1, func(ctx context.Context, i int) error {
		if i == nodes {
			return createScaleNode(ctx, c.Client, dead, i, long)
		}
		return createScaleNode(ctx, c.Client, names[i], i, time.Now())
	}); err != nil {
		b.Fatal(err)
	}
	r := newRenewer(c, names)
	go r.run(ctx)
	// Every Lease renewed once through the API server before the controller starts.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		return r.renewedAll(), nil
	}); err != nil {
		b.Fatalf("the renewer never renewed every Lease: %v", err)
	}
	start := time.Now()
	rep, err := h.StartController("scale", "--target-check-interval=24h")
	if err != nil {
		b.Fatal(err)
	}
	decisions := func() map[string]decision { return wouldFenceAt(rep.Log(), start) }
	var leading time.Time
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		if leading.IsZero() {
			leading = loggedAt(rep.Log(), "Acting as leader", start)
		}
		_, ok := decisions()[dead]
		return ok, nil
	}); err != nil {
		b.Fatalf("no decision for %s, dead before the start: %v\n%s", dead, err, lastLines(rep.Log(), 30))
	}
	first := decisions()[dead].at
	metrics := metricsURL(b, ctx, rep)
	// Quiet: every node renews, nothing to decide. CPU is counted over a fixed window.
	pid := rep.p.pid()
	cpu0, t0 := procCPU(pid), time.Now()
	quiet := time.NewTimer(30 * time.Second)
	select {
	case <-quiet.C:
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	}
	cpu1, t1 := procCPU(pid), time.Now()
	rss, heap := procRSS(pid), metricValue(scrape(ctx, metrics), "go_memstats_heap_inuse_bytes")
	// Stop 2% of the nodes (at least 10) at once, or KUBEFENCE_SCALE_STOP of them.
	stop := envInt("KUBEFENCE_SCALE_STOP", max(10, nodes/50))
	stopped := names[:stop]
	r.stop(stopped)
	// A node is stale once its Lease is older than the threshold and than the evidence
	// floor the detector applied (three of its renewal periods as measured): the lag is
	// the time from then to the decision.
	// The lag has two parts: from the renewal to this replica seeing it (the API server's
	// write and watch), and from the moment the replica's own sighting went stale to the
	// decision (the controller's).
	var lags, own []time.Duration
	var floor time.Duration
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, threshold+2*time.Minute, false, func(context.Context) (bool, error) {
		d := decisions()
		lags, own, floor = lags[:0], own[:0], 0
		for _, node := range stopped {
			dec, ok := d[node]
			if !ok {
				return false, nil
			}
			floor = max(floor, dec.floor)
			lags = append(lags, dec.at.Sub(r.lastRenewed(node).Add(max(threshold, dec.floor))))
			own = append(own, dec.seen-max(threshold, dec.floor))
		}
		return true, nil
	})
	if err != nil {
		var about []string
		for _, line := range strings.Split(rep.Log(), "\n") {
			if strings.Contains(line, `"`+stopped[0]+`"`) {
				about = append(about, line)
			}
		}
		b.Fatalf("decisions for %d of %d stopped nodes: %v; the log on %s:\n%s", len(lags), stop, err, stopped[0],
			lastLines(strings.Join(about, "\n"), 20))
	}
	for node := range decisions() {
		if !slices.Contains(stopped, node) && node != dead {
			b.Errorf("would fence %s, which never stopped renewing (longest renewal gap %s)", node, r.maxGap())
		}
	}
	if g := r.maxGap(); g >= threshold {
		b.Errorf("a live node went %s between renewals, over the %s threshold: this machine cannot renew %d Leases every %s", g, threshold, nodes, scaleRenewEvery)
	}
	b.Logf("%d nodes: RSS %.0f MiB, heap %.0f MiB, idle CPU %.1f ms/s, lag p99 %s (of %d; the controller's own part p99 %s; largest evidence floor %s), start to leading %s, to first decision %s (threshold %s), longest renewal gap %s, %.0f renewals/s",
		nodes, float64(rss)/(1<<20), heap/(1<<20), float64((cpu1-cpu0).Microseconds())/1000/t1.Sub(t0).Seconds(),
		Percentile(lags, 99).Round(time.Millisecond), len(lags), Percentile(own, 99).Round(time.Millisecond), floor, leading.Sub(start).Round(time.Millisecond),
		first.Sub(start).Round(time.Millisecond), threshold, r.maxGap().Round(time.Millisecond), float64(nodes)/scaleRenewEvery.Seconds())
	b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	b.ReportMetric(heap/(1<<20), "heap-MiB")
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/1000/t1.Sub(t0).Seconds(), "idle-cpu-ms/s")
	b.ReportMetric(float64(Percentile(lags, 99).Microseconds())/1000, "lag-p99-ms")
	b.ReportMetric(float64(slices.Max(lags).Microseconds())/1000, "lag-max-ms")
	b.ReportMetric(float64(Percentile(own, 99).Microseconds())/1000, "own-lag-p99-ms")
	b.ReportMetric(float64(leading.Sub(start).Milliseconds()), "start-to-leading-ms")
	b.ReportMetric(float64(first.Sub(start).Milliseconds()), "start-to-first-decision-ms")
	b.ReportMetric(float64(r.maxGap().Milliseconds()), "renew-gap-max-ms")
	b.ReportMetric(float64(floor.Milliseconds()), "evidence-floor-max-ms")
}

// createScaleNode creates a Ready node as a kubelet registers one (labels, capacity,
// addresses, system info), the i-th of three zones, and its Lease, last renewed at renewed.
func createScaleNode(ctx context.Context, client kubernetes.Interface, name string, i int, renewed time.Time) error {
	now := metav1.Now()
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("128Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("500Gi")}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"node.kubernetes.io/instance-type": "m6i.8xlarge", "topology.kubernetes.io/zone": "zone-" + strconv.Itoa(i%3),
			"topology.kubernetes.io/region": "region-1"}},
		Status: corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity,
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
			},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo: corev1.NodeSystemInfo{BootID: "boot-" + name, KubeletVersion: "v1.36.3", ContainerRuntimeVersion: "containerd://2.1.0",
				OSImage: "Ubuntu 24.04 LTS", KernelVersion: "6.8.0", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
	if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return err
	}
	rt := metav1.NewMicroTime(renewed)
	_, err := client.CoordinationV1().Leases(NodeLeaseNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: NodeLeaseNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To(scaleLeaseSeconds),
			RenewTime: &rt}}, metav1.CreateOptions{})
	return err
}

// renewer renews node Leases as kubelets do: each every scaleRenewEvery, spread evenly
// over the period, with an update of the Lease through the API server.
type renewer struct {
	client kubernetes.Interface
	names  []string

	mu      sync.Mutex
	leases  map[string]*coordinationv1.Lease
	last    map[string]time.Time // the renewTime last written
	gap     time.Duration        // the longest time between two renewals of a live node
	stopped map[string]bool
	renewed atomic.Int64
}

func newRenewer(c *Cluster, names []string) *renewer {
	rc := *c.Config
	rc.QPS, rc.Burst = 5000, 5000
	client := kubernetes.NewForConfigOrDie(&rc)
	return &renewer{client: client, names: names, leases: map[string]*coordinationv1.Lease{},
		last: map[string]time.Time{}, stopped: map[string]bool{}}
}

func (r *renewer) run(ctx context.Context) {
	jobs := make(chan string, len(r.names))
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for name := range jobs {
				r.renew(ctx, name)
			}
		})
	}
	defer wg.Wait()
	defer close(jobs)
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	next := 0 // renewals dispatched so far, across periods
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			// Renewal k is due at start + k*period/len(names).
			for due := start.Add(time.Duration(next) * scaleRenewEvery / time.Duration(len(r.names))); !due.After(now); due = start.Add(time.Duration(next) * scaleRenewEvery / time.Duration(len(r.names))) {
				name := r.names[next%len(r.names)]
				next++
				r.mu.Lock()
				skip := r.stopped[name]
				r.mu.Unlock()
				if !skip {
					jobs <- name
				}
			}
		}
	}
}

func (r *renewer) renew(ctx context.Context, name string) {
	leases := r.client.CoordinationV1().Leases(NodeLeaseNamespace)
	r.mu.Lock()
	l := r.leases[name]
	r.mu.Unlock()
	var err error
	if l == nil {
		if l, err = leases.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return
		}
	}
	now := time.Now()
	l = l.DeepCopy()
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	updated, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		r.mu.Lock()
		delete(r.leases, name)
		r.mu.Unlock()
		return
	}
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.last[name]; ok && !r.stopped[name] {
		r.gap = max(r.gap, now.Sub(prev))
	}
	r.leases[name], r.last[name] = updated, now
	r.renewed.Add(1)
}

// renewedAll reports whether every Lease was renewed at least once.
func (r *renewer) renewedAll() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.last) == len(r.names)
}

// stop stops renewing names. A renewal already under way may still land; lastRenewed
// tells when each really was last renewed.
func (r *renewer) stop(names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		r.stopped[n] = true
	}
}

func (r *renewer) lastRenewed(name string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[name]
}

func (r *renewer) maxGap() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gap
}

// klog's text header: severity, month and day, time of day.
var (
	klogHeader = `^[IWE](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})`
	wouldFence = regexp.MustCompile(klogHeader + `.*"Dry run: would fence".* node="([^"]+)"`)
	floorOf    = regexp.MustCompile(`evidence floor ([0-9.]+[a-zµ]+)`)
	seenAgo    = regexp.MustCompile(`\(seen ([0-9.]+[a-zµ]+) ago`)
)

// decision is when the replica log first says it would fence a node, and the evidence
// floor it judged the node's silence against.
type decision struct {
	at    time.Time
	floor time.Duration
	// seen is how long before the decision this replica saw the Lease's last renewal.
	seen time.Duration
}

// wouldFenceAt returns the replica's first dry-run decision for each node.
func wouldFenceAt(log string, ref time.Time) map[string]decision {
	out := map[string]decision{}
	for _, line := range strings.Split(log, "\n") {
		m := wouldFence.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, ok := out[m[2]]; !ok {
			d := decision{at: klogTime(m[1], ref)}
			if f := floorOf.FindStringSubmatch(line); f != nil {
				d.floor, _ = time.ParseDuration(f[1])
			}
			if f := seenAgo.FindStringSubmatch(line); f != nil {
				d.seen, _ = time.ParseDuration(f[1])
			}
			out[m[2]] = d
		}
	}
	return out
}

// loggedAt returns when the log first has a line containing msg; zero if none.
func loggedAt(log, msg string, ref time.Time) time.Time {
	re := regexp.MustCompile(klogHeader)
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, msg) {
			if m := re.FindStringSubmatch(line); m != nil {
				return klogTime(m[1], ref)
			}
		}
	}
	return time.Time{}
}

// klogTime reads klog's "MMDD hh:mm:ss.uuuuuu" (local time, no year) as the instant
// nearest ref.
func klogTime(s string, ref time.Time) time.Time {
	t, err := time.ParseInLocation("0102 15:04:05.000000", s, time.Local)
	if err != nil {
		return time.Time{}
	}
	return time.Date(ref.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.Local)
}

// procRSS is the resident set size of process pid, in bytes.
func procRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// metricValue is the value of an unlabelled metric in a Prometheus text exposition.
func metricValue(exposition, name string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

func lastLines(s string, lines int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}
