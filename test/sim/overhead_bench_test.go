package sim

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/app"
	"github.com/kubefence/kubefence/pkg/controller"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// instantAgent answers at once, so what remains of an incident's duration is the
// controller's own work: API reads and writes, the state machine, queueing.
type instantAgent struct{}

func (instantAgent) Agent(string) (plugin.Agent, error) { return instantAgent{}, nil }
func (instantAgent) Describe(context.Context) (plugin.Description, error) {
	return plugin.Description{Name: "instant"}, nil
}
func (instantAgent) Validate(context.Context, map[string]string) error { return nil }
func (instantAgent) Fence(context.Context, plugin.Request, plugin.Action) (plugin.Result, error) {
	return plugin.Result{State: plugin.StateOff}, nil
}
func (instantAgent) Status(context.Context, plugin.Request) (plugin.Result, error) {
	return plugin.Result{State: plugin.StateOff}, nil
}
func (instantAgent) Unfence(context.Context, plugin.Request) (plugin.Result, error) {
	return plugin.Result{State: plugin.StateOn}, nil
}

// BenchmarkIncidentOverhead: nodes die at once on a real kube-apiserver; an in-process
// controller with an agent that answers instantly fences them all. It runs as a leader
// does in production: every write checks the leader Lease, events go to the API server.
// Reported per incident: p50/p99/max-ms is the overhead, from the moment the node's
// Lease crossed the configured threshold (the only configured wait) to Remediated; it
// includes the controller's API requests and its queueing behind the other incidents,
// before the incident is opened as well as after (target p99 < 100ms). Its two parts:
// detect-lag-p99-ms, threshold to the incident's Detected step, and incident-p99-ms,
// Detected to Remediated. requests/incident counts the API requests the controller sent
// during the round (events are sent one at a time in the background, so some of a big
// round's are still queued when it ends). cpu-ms/incident is the CPU time of this process,
// an upper bound of the controller's (it includes the benchmark's own polling; the API
// server and etcd run in other processes).
//
//	go test ./test/sim -run '^$' -bench IncidentOverhead -benchtime 1x
func BenchmarkIncidentOverhead(b *testing.B) {
	for _, nodes := range []int{1, 100} {
		b.Run(fmt.Sprintf("incidents=%d", nodes), func(b *testing.B) { incidentOverhead(b, nodes) })
	}
}

// requestCounter counts the requests the clients it wraps send, by verb and resource.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (r *requestCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		key := req.Method + " " + resourceOf(req.URL.Path)
		if req.URL.Query().Get("watch") == "true" {
			key = "WATCH " + resourceOf(req.URL.Path)
		}
		r.mu.Lock()
		r.counts[key]++
		r.mu.Unlock()
		return next.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (r *requestCounter) reset() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.counts
	r.counts = map[string]int{}
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

func incidentOverhead(b *testing.B, nodes int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := benchCluster(b, ctx)
	var all, lags, incidents []time.Duration
	var requests int
	var cpu, span time.Duration
	for i := range b.N {
		r := incidentRound(b, ctx, c, fmt.Sprintf("r%d-", i), nodes)
		all = append(all, r.overheads...)
		lags = append(lags, r.lags...)
		incidents = append(incidents, r.incidents...)
		cpu += r.cpu
		span = max(span, r.span)
		for k, n := range r.requests {
			requests += n
			b.Logf("round %d: %4d %s (%.2f per incident)", i, n, k, float64(n)/float64(nodes))
		}
	}
	b.ReportMetric(float64(Percentile(all, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(Percentile(all, 99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(slices.Max(all).Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(Percentile(lags, 99).Microseconds())/1000, "detect-lag-p99-ms")
	b.ReportMetric(float64(Percentile(incidents, 99).Microseconds())/1000, "incident-p99-ms")
	b.ReportMetric(float64(requests)/float64(len(all)), "requests/incident")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(all)), "cpu-ms/incident")
	b.ReportMetric(float64(span.Microseconds())/1000, "all-done-ms")
}

type roundResult struct {
	// overheads run from the threshold to Remediated, lags from the threshold to
	// Detected, incidents from Detected to Remediated.
	overheads, lags, incidents []time.Duration
	// span runs from the first detection to the last remediation.
	span     time.Duration
	requests map[string]int
	cpu      time.Duration
}

func incidentRound(b *testing.B, ctx context.Context, c *Cluster, prefix string, nodes int) roundResult {
	for i := range nodes {
		name := fmt.Sprintf("%snode-%d", prefix, i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"bmc": name}}}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		renew := metav1.NewMicroTime(time.Now())
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: NodeLeaseNamespace},
			Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}
		if _, err := c.Client.CoordinationV1().Leases(NodeLeaseNamespace).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
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
	// This replica holds the leader Lease (epoch 1) for the whole round; the guard reads
	// it before every write, as in production.
	identity := prefix + "bench"
	le := cfg.LeaderElection
	holder, dur := identity, int32(3600)
	now := metav1.NewMicroTime(time.Now())
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: le.Namespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	_ = c.Client.CoordinationV1().Leases(le.Namespace).Delete(ctx, le.Name, metav1.DeleteOptions{})
	if _, err := c.Client.CoordinationV1().Leases(le.Namespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	counter := &requestCounter{counts: map[string]int{}}
	rc := *c.Config
	rc.QPS, rc.Burst = 500, 1000
	rc.Wrap(counter.wrap)
	client := mustClient(b, app.Protobuf(&rc))
	fencing, err := versioned.NewForConfig(&rc)
	if err != nil {
		b.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	ctl, err := controller.New(controller.Options{Config: cfg, Client: client, Fencing: fencing,
		Agents: instantAgent{}, Identity: identity,
		Recorder: broadcaster.NewRecorder(scheme, corev1.EventSource{Component: "kubefence", Host: identity}),
		Guard:    &leader.LeaseGuard{Client: client, Config: le, Identity: identity}})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if err := ctl.StartInformers(runCtx); err != nil {
		b.Fatal(err)
	}
	counter.reset()
	cpuStart := cpuTime()
	go ctl.Run(runCtx, 1)
	var res roundResult
	var first, last time.Time
	// The figures come from the incidents' timelines, not from when this poll sees them, so
	// it polls rarely: listing every incident often would load the API server (and this
	// process) more than the controller under test does.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, false, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, c, "")
		if err != nil {
			return false, nil
		}
		res, first, last = roundResult{}, time.Time{}, time.Time{}
		for _, nf := range incs {
			if !strings.HasPrefix(nf.Spec.NodeName, prefix) {
				continue
			}
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
			res.lags = append(res.lags, detected.Sub(crossed))
			res.incidents = append(res.incidents, done.Sub(detected))
			if first.IsZero() || detected.Before(first) {
				first = detected
			}
			if done.After(last) {
				last = done
			}
		}
		return len(res.overheads) == nodes, nil
	})
	if err != nil {
		b.Fatalf("not every incident remediated: %v", err)
	}
	res.span, res.requests, res.cpu = last.Sub(first), counter.reset(), cpuTime()-cpuStart
	// The next round starts from an empty cluster, as this one did.
	stop()
	cleanupRound(b, ctx, c, fencing, prefix, nodes)
	return res
}

func cleanupRound(b *testing.B, ctx context.Context, c *Cluster, fencing versioned.Interface, prefix string, nodes int) {
	if err := fencing.FencingV1alpha1().NodeFences().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		b.Fatal(err)
	}
	for i := range nodes {
		name := fmt.Sprintf("%snode-%d", prefix, i)
		if err := c.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := c.Client.CoordinationV1().Leases(NodeLeaseNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func mustClient(b *testing.B, rc *rest.Config) kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}
