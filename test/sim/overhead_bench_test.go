package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/app"
	"github.com/kubefence/kubefence/pkg/controller"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/test/sim/bmc"
	"github.com/prometheus/client_golang/prometheus"
)

// instantAgent answers at once, so what remains of an incident's duration is the
// controller's own work: API reads and writes, the state machine, queueing. It logs its
// Fence calls per target, as a BMC logs power requests, for the invariant checks.
type instantAgent struct {
	mu       sync.Mutex
	inFlight map[string]int
	calls    map[string][]bmc.PowerEvent
	overlaps []string
}

func newInstantAgent() *instantAgent {
	return &instantAgent{inFlight: map[string]int{}, calls: map[string][]bmc.PowerEvent{}}
}

func (a *instantAgent) Agent(string) (plugin.Agent, error) { return a, nil }
func (a *instantAgent) Describe(context.Context) (plugin.Description, error) {
	return plugin.Description{Name: "instant"}, nil
}
func (a *instantAgent) Validate(context.Context, map[string]string) error { return nil }
func (a *instantAgent) Fence(_ context.Context, req plugin.Request, _ plugin.Action) (plugin.Result, error) {
	a.mu.Lock()
	a.inFlight[req.Target]++
	if n := a.inFlight[req.Target]; n > 1 {
		a.overlaps = append(a.overlaps, fmt.Sprintf("%d Fence calls in flight for %s at once (invariant 3)", n, req.Target))
	}
	a.calls[req.Target] = append(a.calls[req.Target], bmc.PowerEvent{Time: time.Now(), Action: bmc.ActionOff, Source: "agent"})
	a.inFlight[req.Target]--
	a.mu.Unlock()
	return plugin.Result{State: plugin.StateOff}, nil
}
func (a *instantAgent) Status(context.Context, plugin.Request) (plugin.Result, error) {
	return plugin.Result{State: plugin.StateOff}, nil
}
func (a *instantAgent) Unfence(context.Context, plugin.Request) (plugin.Result, error) {
	return plugin.Result{State: plugin.StateOn}, nil
}

// BenchmarkIncidentCost: N nodes die at once on a real kube-apiserver, and their
// incidents run four times per round, one after the other on the same API server: as
// the floor, only the writes an incident cannot do without and no controller at all
// (floorIncident), each status write a phase and a message; by the controller
// (in-process, with an agent that answers at once; it runs as a leader does in
// production: leader Lease checks, Events); and as the floor again, its two status
// writes carrying what the controller's two carried (recordWrites). All three see the
// same machine, so their ratios are what the controller costs, whatever the machine's
// speed: against the first floor, all of it; against the second, what it costs apart
// from the size of the record it keeps. Last, as the first floor with each incident's
// last status write held until every incident of the round released its node, the
// order the controller's records keep in a storm (releaseGate): against it, what the
// controller costs apart from that order.
//
// Reported: ratio-p99 (controller p99 / floor p99), record-ratio-p99 and -p50 (against
// the floor with the record), yield-ratio-p99 and -p50 (against the floor whose last
// writes wait), round-ratio-p99-median and round-yield-ratio-p99-median (each round's
// ratio, the median over the rounds: the parts of one round run a few seconds apart, and
// a slow moment of the machine weighs on the pooled p99s of one part only), controller
// p50/p99-ms, floor-p99-ms, record-floor-p99-ms, yield-floor-p99-ms,
// requests/incident and floor-requests/incident, detect-lag-p99-ms, cpu-ms/incident,
// status-bytes/incident (the final status's size in JSON) and the CPU the API server and
// etcd used while each part's incidents ran, per incident. The controller's time runs
// from the moment the node's Lease crossed the configured threshold (the only configured
// wait) to Remediated, the step taken once the last taint is on the node, so it includes
// the queueing behind the other incidents before each is opened; the floor's from its
// first write to its last taint. detect-lag-p99-ms is threshold to Detected. Each round
// also logs when the incidents took each step, how long the API server took to answer
// each kind of request of each half, what each process's CPU was, and one final status.
// requests/incident counts every request the controller sent, its Events included: the
// round waits until the Events it recorded have been sent. cpu-ms/incident is this
// process's CPU time, an upper bound of the controller's (it includes the benchmark's
// own polling and watch; the API server and etcd run in other processes).
//
// Each controller round is checked against the safety invariants it can break here:
// one incident per node (3), no two Fence calls in flight for one target (3), and no
// out-of-service taint before the node's Fence call (1), as an independent watch sees
// them.
//
//	go test ./test/sim -run '^$' -bench 'IncidentCost/incidents=(1|100)$' -benchtime 10x
//	go test ./test/sim -run '^$' -bench 'IncidentCost/incidents=1000$' -benchtime 1x
func BenchmarkIncidentCost(b *testing.B) {
	for _, nodes := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("incidents=%d", nodes), func(b *testing.B) { incidentCost(b, nodes) })
	}
}

// requestCounter counts the requests the clients it wraps send, by verb and resource,
// and how long the API server took to answer each (from sending it to the response's
// headers, after the client's rate limiter let it go).
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
	took   map[string][]time.Duration
}

func (r *requestCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		key := req.Method + " " + resourceOf(req.URL.Path)
		if req.URL.Query().Get("watch") == "true" {
			key = "WATCH " + resourceOf(req.URL.Path)
		}
		start := time.Now()
		resp, err := next.RoundTrip(req)
		took := time.Since(start)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.counts[key]++
		if !strings.HasPrefix(key, "WATCH ") {
			if r.took == nil {
				r.took = map[string][]time.Duration{}
			}
			r.took[key] = append(r.took[key], took)
		}
		return resp, err
	})
}

// latencies says, per verb and resource, the p50/p99 of the API server's answers since
// the last call, and forgets them.
func (r *requestCounter) latencies() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.took)) {
		ds := r.took[k]
		parts = append(parts, fmt.Sprintf("%s %d/%dms (%d)", k, Percentile(ds, 50).Milliseconds(), Percentile(ds, 99).Milliseconds(), len(ds)))
	}
	r.took = nil
	return strings.Join(parts, ", ")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (r *requestCounter) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[key]
}

func (r *requestCounter) reset() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.counts
	r.counts, r.took = map[string]int{}, nil
	return out
}

// resourceOf returns the resource (and subresource) of an API path:
// /api/v1/nodes/n → nodes, /apis/g/v/namespaces/ns/leases/l → leases.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) > 0 && parts[0] == "apis" && len(parts) > 3 {
		parts = parts[3:]
	} else if len(parts) > 2 {
		parts = parts[2:]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "?"
	case 3:
		return parts[0] + "/" + parts[2]
	}
	return parts[0]
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchCluster starts a cluster with kubefence's CRD for one benchmark; it stops with
// the benchmark.
func benchCluster(b *testing.B, ctx context.Context) *Cluster {
	c, err := Start(ctx, Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Stop() })
	if err := InstallCRD(ctx, c); err != nil {
		b.Fatal(err)
	}
	return c
}

func incidentCost(b *testing.B, nodes int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c := benchCluster(b, ctx)
	rec, err := NewRecorder(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	floor, err := newFloor(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	var all, lags, floors, recordFloors, yieldFloors []time.Duration
	// roundRatios and roundYieldRatios are each round's controller p99 over its floor's
	// and its waiting floor's: parts a round apart see the machine in different moods.
	var roundRatios, roundYieldRatios []float64
	var floorP99 time.Duration
	var requests, floorRequests, statusBytes int
	// cpu is this process's CPU from the controller's start to the round's end;
	// controlPlane, floorCP, recordCP and yieldCP what the API server and etcd used while
	// the incidents of each part ran.
	var cpu, controlPlane, floorCP, recordCP, yieldCP time.Duration
	for i := range b.N {
		took, sent, err := floor.round(ctx, fmt.Sprintf("f%d-", i), nodes, nil, false)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("round %d: the floor's incidents used %s", i, floor.cpu)
		floorCP += floor.cpu.controlPlane()
		floors = append(floors, took...)
		floorP99 = Percentile(took, 99)
		floorRequests += sent
		b.Logf("round %d: the floor's requests answered in p50/p99: %s", i, floor.counter.latencies())
		r := incidentRound(b, ctx, c, rec, fmt.Sprintf("r%d-", i), nodes)
		b.Logf("round %d: the controller's incidents used %s", i, r.cpuUse)
		controlPlane += r.cpuUse.controlPlane()
		logSteps(b, i, r.steps)
		b.Logf("round %d: the controller's requests answered in p50/p99: %s", i, r.answers)
		statusBytes += r.statusBytes
		if i == 0 {
			b.Logf("round 0: one incident's final status (%d bytes): %s", len(r.sample), r.sample)
		}
		// The floor again, its status writes carrying the record this round's controller
		// wrote: the record's cost to the API server, apart from the controller's work.
		var final v1alpha1.NodeFenceStatus
		if err := json.Unmarshal(r.sample, &final); err != nil {
			b.Fatal(err)
		}
		record, err := recordWrites(final)
		if err != nil {
			b.Fatal(err)
		}
		// floorPart runs the floor once more and adds its times and CPU to took and cp.
		floorPart := func(prefix string, record []map[string]any, yield bool, what string, took *[]time.Duration, cp *time.Duration) []time.Duration {
			t, _, err := floor.round(ctx, fmt.Sprintf("%s%d-", prefix, i), nodes, record, yield)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("round %d: %s used %s", i, what, floor.cpu)
			*cp += floor.cpu.controlPlane()
			*took = append(*took, t...)
			return t
		}
		floorPart("g", record, false, "the floor's incidents with the controller's record", &recordFloors, &recordCP)
		// And the floor whose last status writes wait for every release of the round, as
		// the controller's records wait in a storm for its releases (releaseGate).
		took = floorPart("h", nil, true, "the floor with its last writes after every release", &yieldFloors, &yieldCP)
		roundRatios = append(roundRatios, float64(Percentile(r.overheads, 99))/float64(floorP99))
		roundYieldRatios = append(roundYieldRatios, float64(Percentile(r.overheads, 99))/float64(Percentile(took, 99)))
		floor.counter.reset()
		all = append(all, r.overheads...)
		lags = append(lags, r.lags...)
		cpu += r.cpu
		for _, k := range slices.Sorted(maps.Keys(r.requests)) {
			requests += r.requests[k]
			b.Logf("round %d: %5d %s (%.2f per incident)", i, r.requests[k], k, float64(r.requests[k])/float64(nodes))
		}
	}
	p99, f99, r99, y99 := Percentile(all, 99), Percentile(floors, 99), Percentile(recordFloors, 99), Percentile(yieldFloors, 99)
	b.Logf("%d incidents at once, %d rounds: controller p99 %s, floor p99 %s, ratio %.2f; with the record %s, ratio %.2f; requests/incident %.2f, floor %.2f",
		nodes, b.N, p99.Round(time.Millisecond), f99.Round(time.Millisecond), float64(p99)/float64(f99),
		r99.Round(time.Millisecond), float64(p99)/float64(r99),
		float64(requests)/float64(len(all)), float64(floorRequests)/float64(len(floors)))
	b.ReportMetric(float64(p99)/float64(f99), "ratio-p99")
	// With few incidents, p99 is the slowest of a handful: the medians say more there.
	b.ReportMetric(float64(Percentile(all, 50))/float64(Percentile(floors, 50)), "ratio-p50")
	b.ReportMetric(float64(p99)/float64(r99), "record-ratio-p99")
	b.ReportMetric(float64(Percentile(all, 50))/float64(Percentile(recordFloors, 50)), "record-ratio-p50")
	b.ReportMetric(float64(r99.Microseconds())/1000, "record-floor-p99-ms")
	b.ReportMetric(float64(p99)/float64(y99), "yield-ratio-p99")
	b.ReportMetric(median(roundRatios), "round-ratio-p99-median")
	b.ReportMetric(median(roundYieldRatios), "round-yield-ratio-p99-median")
	b.ReportMetric(float64(Percentile(all, 50))/float64(Percentile(yieldFloors, 50)), "yield-ratio-p50")
	b.ReportMetric(float64(y99.Microseconds())/1000, "yield-floor-p99-ms")
	b.ReportMetric(float64(yieldCP.Microseconds())/1000/float64(len(yieldFloors)), "yield-floor-apiserver+etcd-cpu-ms/incident")
	b.ReportMetric(float64(recordCP.Microseconds())/1000/float64(len(recordFloors)), "record-floor-apiserver+etcd-cpu-ms/incident")
	b.ReportMetric(float64(Percentile(floors, 50).Microseconds())/1000, "floor-p50-ms")
	b.ReportMetric(float64(Percentile(all, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(f99.Microseconds())/1000, "floor-p99-ms")
	b.ReportMetric(float64(Percentile(lags, 99).Microseconds())/1000, "detect-lag-p99-ms")
	b.ReportMetric(float64(requests)/float64(len(all)), "requests/incident")
	b.ReportMetric(float64(floorRequests)/float64(len(floors)), "floor-requests/incident")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(all)), "cpu-ms/incident")
	b.ReportMetric(float64(statusBytes)/float64(len(all)), "status-bytes/incident")
	b.ReportMetric(float64(controlPlane.Microseconds())/1000/float64(len(all)), "apiserver+etcd-cpu-ms/incident")
	b.ReportMetric(float64(floorCP.Microseconds())/1000/float64(len(floors)), "floor-apiserver+etcd-cpu-ms/incident")
}

type roundResult struct {
	// overheads run from the threshold to Remediated, lags from the threshold to Detected.
	overheads, lags []time.Duration
	requests        map[string]int
	cpu             time.Duration
	// steps are, per step type, when each incident first took it after the threshold:
	// where an incident's time goes.
	steps map[string][]time.Duration
	// statusBytes sums the size of the incidents' final status in JSON: what each of
	// their status writes carried at most.
	statusBytes int
	// sample is one incident's final status, for the log.
	sample []byte
	// answers are how long the API server took to answer each kind of request.
	answers string
	// cpuUse is the CPU each process used from the first threshold to the last
	// Remediated step.
	cpuUse cpuUse
}

func (r *roundResult) addSteps(nf v1alpha1.NodeFence, crossed time.Time) {
	if r.steps == nil {
		r.steps = map[string][]time.Duration{}
	}
	seen := map[string]bool{}
	for _, st := range nf.Status.Timeline {
		if !seen[st.Type] && st.Type != v1alpha1.StepEvidenceStarted {
			seen[st.Type] = true
			r.steps[st.Type] = append(r.steps[st.Type], st.Time.Sub(crossed))
		}
	}
}

// logSteps logs when, after the threshold, the incidents took each step (p50 and p99),
// in the order of the medians.
func logSteps(b *testing.B, round int, steps map[string][]time.Duration) {
	type at struct {
		step     string
		p50, p99 time.Duration
	}
	var all []at
	for step, ds := range steps {
		all = append(all, at{step, Percentile(ds, 50), Percentile(ds, 99)})
	}
	slices.SortFunc(all, func(x, y at) int { return int(x.p50 - y.p50) })
	var parts []string
	for _, a := range all {
		parts = append(parts, fmt.Sprintf("%s %d/%dms", a.step, a.p50.Milliseconds(), a.p99.Milliseconds()))
	}
	b.Logf("round %d: steps after the threshold, p50/p99: %s", round, strings.Join(parts, ", "))
}

// countingRecorder counts the Events the controller records, so that a round can wait
// until the broadcaster has sent them all before it counts requests.
type countingRecorder struct {
	record.EventRecorder
	n atomic.Int64
}

func (r *countingRecorder) Event(o runtime.Object, typ, reason, msg string) {
	r.n.Add(1)
	r.EventRecorder.Event(o, typ, reason, msg)
}

func (r *countingRecorder) Eventf(o runtime.Object, typ, reason, format string, args ...any) {
	r.n.Add(1)
	r.EventRecorder.Eventf(o, typ, reason, format, args...)
}

func (r *countingRecorder) AnnotatedEventf(o runtime.Object, ann map[string]string, typ, reason, format string, args ...any) {
	r.n.Add(1)
	r.EventRecorder.AnnotatedEventf(o, ann, typ, reason, format, args...)
}

// createDeadNodes creates nodes whose Leases were renewed once, now, and never again.
func createDeadNodes(ctx context.Context, c *Cluster, prefix string, nodes int) error {
	return forEach(ctx, nodes, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("%snode-%d", prefix, i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"bmc": name}}}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return err
		}
		renew := metav1.NewMicroTime(time.Now())
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: NodeLeaseNamespace},
			Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}
		_, err := c.Client.CoordinationV1().Leases(NodeLeaseNamespace).Create(ctx, lease, metav1.CreateOptions{})
		return err
	})
}

// forEach runs do for 0..n-1, 16 at a time, and returns the first error.
func forEach(ctx context.Context, n int, do func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error { return do(ctx, i) })
	}
	return g.Wait()
}

// holdLeaderLease makes identity the holder of the leader Lease (epoch 1) for the round.
func holdLeaderLease(ctx context.Context, c *Cluster, le v1alpha1.LeaderElection, identity string) error {
	holder, dur := identity, int32(3600)
	now := metav1.NewMicroTime(time.Now())
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: le.Namespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_ = c.Client.CoordinationV1().Leases(le.Namespace).Delete(ctx, le.Name, metav1.DeleteOptions{})
	_, err := c.Client.CoordinationV1().Leases(le.Namespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{})
	return err
}

func incidentRound(b *testing.B, ctx context.Context, c *Cluster, rec *Recorder, prefix string, nodes int) roundResult {
	if err := createDeadNodes(ctx, c, prefix, nodes); err != nil {
		b.Fatal(err)
	}
	all := intstr.FromString("100%")
	const threshold = 2 * time.Second
	cfg := &v1alpha1.Config{
		Detection: v1alpha1.Detection{LeaseStaleAfter: metav1.Duration{Duration: threshold}},
		Agents: []v1alpha1.Agent{{Name: "instant", SHA256: fmt.Sprintf("%064d", 0),
			Target: v1alpha1.TargetSource{Annotation: "bmc"}}},
		Policies: []v1alpha1.Policy{{Name: "all", Levels: []v1alpha1.Level{{Agents: []string{"instant"}}},
			Budget: v1alpha1.Budget{MaxConcurrent: int32(nodes), MaxUnhealthy: &all}}},
	}
	cfg.Default()
	// This replica holds the leader Lease for the whole round; its guard reads it as in
	// production, and its Events go out through the same confirmed sink.
	identity := prefix + "bench"
	le := cfg.LeaderElection
	if err := holdLeaderLease(ctx, c, le, identity); err != nil {
		b.Fatal(err)
	}
	counter := &requestCounter{counts: map[string]int{}}
	rc := *c.Config
	// The production defaults, or what KUBEFENCE_BENCH_QPS, _BURST and _WORKERS ask for
	// (to choose the defaults from these measurements).
	rc.QPS, rc.Burst = float32(envInt("KUBEFENCE_BENCH_QPS", app.DefaultQPS)), envInt("KUBEFENCE_BENCH_BURST", app.DefaultBurst)
	rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst)
	rc.Wrap(counter.wrap)
	client := mustClient(b, app.Protobuf(&rc))
	fencing, err := versioned.NewForConfig(&rc)
	if err != nil {
		b.Fatal(err)
	}
	guard := &leader.LeaseGuard{Client: client, Config: le, Identity: identity}
	events, stopEvents := leader.NewEventRecorder(ctx, client, guard, identity)
	defer stopEvents()
	recorder := &countingRecorder{EventRecorder: events}
	agent := newInstantAgent()
	ctrls, err := app.Assemble(app.Assembly{Config: cfg, Kube: client, Fencing: fencing, Agents: agent, Identity: identity,
		Recorder: recorder, Registry: prometheus.NewRegistry(), Lease: guard,
		Tuning: controller.Tuning{Workers: envInt("KUBEFENCE_BENCH_WORKERS", controller.DefaultWorkers)}})
	if err != nil {
		b.Fatal(err)
	}
	ctl := ctrls.Loop
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if err := ctrls.Caches.Start(runCtx); err != nil {
		b.Fatal(err)
	}
	counter.reset()
	cpuStart := cpuTime()
	sampler := sampleCPU(c)
	var firstCrossed, lastDone time.Time
	ctrls.Guard.Lead(1)
	go ctl.Run(runCtx)
	var res roundResult
	perNode := map[string]int{}
	// The figures come from the incidents' timelines, not from when this poll sees them.
	// It reads the recorder's watch cache, which every part of the round keeps fed: a poll
	// that listed the incidents loaded the API server during this part only (its list
	// handler took 0.17 s of kube-apiserver's CPU in five rounds of 100, profiled).
	err = wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, false, func(ctx context.Context) (bool, error) {
		incs, err := rec.Incidents(prefix)
		if err != nil {
			return false, err
		}
		res, perNode = roundResult{}, map[string]int{}
		firstCrossed, lastDone = time.Time{}, time.Time{}
		for _, nf := range incs {
			perNode[nf.Spec.NodeName]++
			if nf.Status.Phase != v1alpha1.PhaseRemediated {
				return false, nil
			}
			// EvidenceStarted is when the controller last saw the Lease renewed (here: when
			// it started leading); the node crossed its threshold one threshold later.
			evidence, ok := stepAt(nf, v1alpha1.StepEvidenceStarted)
			if !ok {
				return false, fmt.Errorf("incident %s has no EvidenceStarted step", nf.Name)
			}
			crossed := evidence.Add(threshold)
			detected, _ := stepAt(nf, v1alpha1.StepDetected)
			done, _ := stepAt(nf, v1alpha1.StepRemediated)
			res.overheads = append(res.overheads, done.Sub(crossed))
			if firstCrossed.IsZero() || crossed.Before(firstCrossed) {
				firstCrossed = crossed
			}
			if done.After(lastDone) {
				lastDone = done
			}
			res.lags = append(res.lags, detected.Sub(crossed))
			res.addSteps(nf, crossed)
			if raw, err := json.Marshal(nf.Status); err == nil {
				res.statusBytes += len(raw)
				res.sample = raw
			}
		}
		return len(perNode) == nodes, nil
	})
	if err != nil {
		b.Fatalf("not every incident remediated: %v", err)
	}
	res.cpuUse = sampler.between(firstCrossed, lastDone)
	// Every Event recorded is sent before the requests are counted, or dropped: client-go's
	// broadcaster drops what its queue (1,000 Events) cannot hold, so the wait also ends
	// when no Event went out for three seconds.
	sent := func() int { return counter.count("POST events") + counter.count("PATCH events") }
	last, lastChange := -1, time.Now()
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		if n := sent(); n != last {
			last, lastChange = n, time.Now()
		}
		return last >= int(recorder.n.Load()) || time.Since(lastChange) > 3*time.Second, nil
	})
	if err != nil {
		b.Fatalf("%d Events recorded, %d sent: %v", recorder.n.Load(), sent(), err)
	}
	if n := int(recorder.n.Load()); sent() < n {
		b.Logf("%d Events recorded, %d sent: the rest were dropped by client-go's broadcaster", n, sent())
	}
	res.answers = counter.latencies()
	res.requests, res.cpu = counter.reset(), cpuTime()-cpuStart
	stop()
	for _, v := range roundViolations(rec.All(), agent, prefix, perNode) {
		b.Errorf("safety: %s", v)
	}
	// The next round starts from an empty cluster, as this one did.
	cleanupRound(b, ctx, c, fencing, prefix, nodes)
	return res
}

// roundViolations checks a round against the invariants it can break: one incident per
// node, one Fence call in flight per target, and no out-of-service taint on a node before
// its Fence call (the agent logs its calls as a BMC logs power requests).
func roundViolations(seen []Seen, agent *instantAgent, prefix string, perNode map[string]int) []string {
	var ours []Seen
	tainted := map[string]bool{}
	for _, s := range seen {
		if strings.HasPrefix(s.Node, prefix) {
			ours = append(ours, s)
			if s.Kind == SeenTaintAdded {
				tainted[s.Node] = true
			}
		}
	}
	v := checkOpenIncidents(ours)
	// The checks below judge what the watch saw: it must have seen every release.
	if len(tainted) != len(perNode) {
		v = append(v, fmt.Sprintf("the watch saw the out-of-service taint on %d of %d nodes", len(tainted), len(perNode)))
	}
	for _, node := range slices.Sorted(maps.Keys(perNode)) {
		if n := perNode[node]; n != 1 {
			v = append(v, fmt.Sprintf("%d incidents for node %s, want 1", n, node))
		}
	}
	agent.mu.Lock()
	defer agent.mu.Unlock()
	v = append(v, agent.overlaps...)
	for node := range perNode {
		v = append(v, CheckReleasedAfterFence(ours, node, agent.calls[node])...)
	}
	return v
}

func cleanupRound(b *testing.B, ctx context.Context, c *Cluster, fencing versioned.Interface, prefix string, nodes int) {
	if err := fencing.FencingV1alpha1().NodeFences().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		b.Fatal(err)
	}
	err := forEach(ctx, nodes, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("%snode-%d", prefix, i)
		if err := c.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		return c.Client.CoordinationV1().Leases(NodeLeaseNamespace).Delete(ctx, name, metav1.DeleteOptions{})
	})
	if err != nil {
		b.Fatal(err)
	}
}

func mustClient(b *testing.B, rc *rest.Config) kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

// cpuSampler samples, every 10 ms, the CPU time this process and each control-plane
// process have used, so that a round can say what its incidents cost each of them
// between two instants (its first threshold and its last Remediated step). Only its
// goroutine writes the samples, and between reads them once it has ended.
type cpuSampler struct {
	at      []time.Time
	samples []map[string]time.Duration
	stop    chan struct{}
	done    chan struct{}
}

func sampleCPU(c *Cluster) *cpuSampler {
	s := &cpuSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			m := c.ProcessCPU()
			m["this process"] = cpuTime()
			s.at, s.samples = append(s.at, time.Now()), append(s.samples, m)
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// between stops the sampler and returns how much CPU each process used from the last
// sample at or before from to the first at or after to, and over how long.
func (s *cpuSampler) between(from, to time.Time) cpuUse {
	close(s.stop)
	<-s.done
	i, _ := slices.BinarySearchFunc(s.at, from, func(t, x time.Time) int { return t.Compare(x) })
	j, _ := slices.BinarySearchFunc(s.at, to, func(t, x time.Time) int { return t.Compare(x) })
	if i > 0 && (i == len(s.at) || s.at[i].After(from)) {
		i--
	}
	j = min(j, len(s.at)-1)
	if len(s.at) == 0 || i >= j {
		return cpuUse{}
	}
	use := cpuUse{by: map[string]time.Duration{}, over: s.at[j].Sub(s.at[i])}
	for name, d := range s.samples[j] {
		use.by[name] = d - s.samples[i][name]
	}
	return use
}

// cpuUse is the CPU each process used over a stretch of time.
type cpuUse struct {
	by   map[string]time.Duration
	over time.Duration
}

// controlPlane is the CPU the API server and etcd used.
func (u cpuUse) controlPlane() time.Duration { return u.by["kube-apiserver"] + u.by["etcd"] }

func (u cpuUse) String() string {
	if u.by == nil {
		return "not sampled"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(u.by)) {
		parts = append(parts, fmt.Sprintf("%s %s", name, u.by[name].Round(10*time.Millisecond)))
	}
	return fmt.Sprintf("%s in %s", strings.Join(parts, ", "), u.over.Round(10*time.Millisecond))
}

// median is the middle of xs (the mean of the two middle ones for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}
