package nodeagent

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

const ns = "kubefence"

type fixture struct {
	agent    *Agent
	kube     *kubefake.Clientset
	fencing  *fencingfake.Clientset
	emu      *watchdog.Emulator
	expired  atomic.Int32
	readErr  atomic.Bool
	writeErr atomic.Bool
	stop     func() error // ends Run and returns its error
}

// newFixture is an agent on node a of nodes a, b, c, with an emulated watchdog when
// withWatchdog, and the given NodeFences.
func newFixture(t *testing.T, withWatchdog bool, fences ...*v1alpha1.NodeFence) *fixture {
	t.Helper()
	return newFixtureOf(t, withWatchdog, nil, fences...)
}

// newFixtureOf is newFixture with setup changing the agent's configuration before it runs.
func newFixtureOf(t *testing.T, withWatchdog bool, setup func(*Config), fences ...*v1alpha1.NodeFence) *fixture {
	t.Helper()
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var nodes []runtime.Object
	for _, n := range []string{"a", "b", "c"} {
		nodes = append(nodes, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	f := &fixture{kube: kubefake.NewClientset()}
	for _, verb := range []string{"create", "update"} {
		f.kube.PrependReactor(verb, "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			if f.writeErr.Load() {
				return true, nil, errors.New("connection refused")
			}
			return false, nil, nil
		})
	}
	var objs []runtime.Object
	for _, nf := range fences {
		objs = append(objs, nf)
	}
	f.fencing = fencingfake.NewSimpleClientset(objs...)
	f.fencing.PrependReactor("list", "nodefences", func(k8stesting.Action) (bool, runtime.Object, error) {
		if f.readErr.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	cfg := Config{Node: "a", Namespace: ns, BootID: "boot-1",
		Clients: Clients{Kube: f.kube, Fencing: f.fencing, Metadata: metadatafake.NewSimpleMetadataClient(scheme, nodes...)},
		Timing:  Timing{Isolation: 600 * time.Millisecond, ReadEvery: 100 * time.Millisecond, ReportEvery: time.Minute},
	}
	if withWatchdog {
		f.emu = &watchdog.Emulator{Path: filepath.Join(t.TempDir(), "wd.sock"), Expired: func() { f.expired.Add(1) }}
		if err := f.emu.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.emu.Close() })
		cfg.Watchdog = &watchdog.Socket{Path: f.emu.Path}
		cfg.WatchdogTimeout = time.Second
	}
	if setup != nil {
		setup(&cfg)
	}
	f.agent = New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.agent.Run(ctx) }()
	var once sync.Once
	var runErr error
	f.stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() {
		if err := f.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return f
}

// reportWhere polls the report Lease until ok holds of it.
func (f *fixture) reportWhere(t *testing.T, what string, ok func(Report) bool) Report {
	t.Helper()
	var last Report
	var lastErr error
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := f.kube.CoordinationV1().Leases(ns).Get(ctx, LeaseName("a"), metav1.GetOptions{})
		if err != nil {
			lastErr = err
			return false, nil
		}
		if last, lastErr = Decode(l); lastErr != nil {
			return false, nil
		}
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("no report where %s: last %+v (%v)", what, last, lastErr)
	}
	return last
}

func fence(node string, phase v1alpha1.Phase) *v1alpha1.NodeFence {
	return &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + strings.ToLower(string(phase))},
		Spec: v1alpha1.NodeFenceSpec{NodeName: node}, Status: v1alpha1.NodeFenceStatus{Phase: phase}}
}

func TestReportWithoutWatchdog(t *testing.T) {
	f := newFixture(t, false, fence("b", v1alpha1.PhaseFencing), fence("c", v1alpha1.PhaseHeld), fence("c", v1alpha1.PhaseRecovered))
	r := f.reportWhere(t, "it holds b", func(r Report) bool { return len(r.Holds) > 0 })
	want := MembersOf([]string{"c", "b", "a"})
	if r.BootID != "boot-1" || r.Isolation != "600ms" || r.Members != want || !slices.Equal(r.Holds, []string{"b-fencing"}) || r.Watchdog.Armed || r.Watchdog.Stopped == "" {
		t.Errorf("report %+v; want boot-1, isolation 600ms, members %+v, holds [b-fencing] (c's incidents are held or ended), no watchdog and why", r, want)
	}
	l, err := f.kube.CoordinationV1().Leases(ns).Get(context.Background(), LeaseName("a"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Labels[NodeLabel] != "a" || l.Labels[ComponentLabel] != Component || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "a" || l.Spec.RenewTime == nil {
		t.Errorf("lease labels %v holder %v renew %v: want node a, component node-agent, holder a, a renew time", l.Labels, l.Spec.HolderIdentity, l.Spec.RenewTime)
	}
	if err := f.agent.Healthy(); err != nil {
		t.Errorf("Healthy: %v", err)
	}
}

// The node's own NodeFence stops the feeding once past its budget, and not before.
func TestOwnNodeFenceStopsFeeding(t *testing.T) {
	held := fence("a", v1alpha1.PhaseHeld)
	f := newFixture(t, true, held)
	f.reportWhere(t, "the watchdog is armed", func(r Report) bool { return r.Watchdog.Armed && r.Watchdog.Stopped == "" })
	if armed, timeout := f.emu.Armed(); !armed || timeout != time.Second {
		t.Fatalf("emulator armed=%t timeout=%s, want armed at 1s", armed, timeout)
	}
	// Fed across three timeouts while held: a node that did not feed would have reset.
	feeder, _ := f.agent.started()
	heldFrom := time.Now()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return feeder.State().LastFed.After(heldFrom.Add(3 * time.Second)), nil
	}); err != nil {
		t.Fatalf("not fed three timeouts after its incident was held: %+v", feeder.State())
	}
	if f.expired.Load() > 0 {
		t.Fatal("the watchdog expired while the node's incident was held by its budget")
	}
	fencing := held.DeepCopy()
	fencing.Status.Phase = v1alpha1.PhaseFencing
	if _, err := f.fencing.FencingV1alpha1().NodeFences().UpdateStatus(context.Background(), fencing, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := f.reportWhere(t, "feeding stopped", func(r Report) bool { return r.Watchdog.Stopped != "" })
	if !r.Watchdog.Armed || r.WatchdogTimeout() != time.Second || !slices.Equal(r.Holds, []string{"a-held"}) || !strings.Contains(r.Watchdog.Stopped, "wants node a fenced") {
		t.Errorf("report %+v: want armed at 1s, holding a, stopped because the cluster wants a fenced", r)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.expired.Load() > 0, nil
	}); err != nil {
		t.Fatal("the watchdog did not expire after feeding stopped")
	}
}

// Without a read for longer than isolation (and no peers), the node stops feeding.
func TestIsolatedNodeStopsFeeding(t *testing.T) {
	f := newFixture(t, true)
	f.reportWhere(t, "the watchdog is armed", func(r Report) bool { return r.Watchdog.Armed && r.Watchdog.Stopped == "" })
	f.readErr.Store(true)
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.expired.Load() > 0, nil
	}); err != nil {
		t.Fatal("the watchdog did not expire on a node cut off from the API server")
	}
	if feeder, _ := f.agent.started(); !strings.Contains(feeder.State().Stopped, "cut off") {
		t.Errorf("feeder stopped for %q, want cut off", feeder.State().Stopped)
	}
}

func TestValidate(t *testing.T) {
	ok := func() *Config {
		return &Config{Node: "a", Namespace: ns, BootID: "b", Timing: Timing{Isolation: 10 * time.Second, ReadEvery: 2 * time.Second, ReportEvery: time.Minute}}
	}
	if err := ok().Validate(); err != nil {
		t.Fatalf("valid configuration: %v", err)
	}
	for name, tc := range map[string]struct {
		mut  func(*Config)
		want string
	}{
		"no node":            {func(c *Config) { c.Node = "" }, "node name"},
		"no namespace":       {func(c *Config) { c.Namespace = "" }, "namespace"},
		"no boot":            {func(c *Config) { c.BootID = "" }, "boot ID"},
		"reads too rare":     {func(c *Config) { c.Timing.ReadEvery = 4 * time.Second }, "read interval"},
		"reports too often":  {func(c *Config) { c.Timing.ReportEvery = time.Second }, "report interval"},
		"watchdog too quick": {func(c *Config) { c.Watchdog = &watchdog.Socket{}; c.WatchdogTimeout = 0 }, "watchdog timeout"},
	} {
		c := ok()
		tc.mut(c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tc.want)
		}
	}
}

func TestDecodeNamesTheField(t *testing.T) {
	for body, want := range map[string]string{
		`{"isolation":"10s","watchdog":{"armed":true,"timeout":"soon"}}`: "watchdog.timeout",
		`{"isolation":"10s","members":{"count":3,"sha256":"xyz"}}`:       "members.sha256",
		`{"isolation":"10s","holds":["b","a"]}`:                          "holds",
		`{"isolation":"10s","holds":["Not_A_Name"]}`:                     "holds[0]",
		`{"isolation":"never"}`:                                          "isolation",
		`{"bootID":`:                                                     "unexpected end",
	} {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kubefence-node-a", Annotations: map[string]string{ReportAnnotation: body}}}
		if _, err := Decode(l); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "kubefence/kubefence-node-a") {
			t.Errorf("Decode(%s): %v, want an error naming the lease and %q", body, err, want)
		}
	}
}

// The metrics say what the agent is doing: armed and feeding, reading, holding.
func TestMetrics(t *testing.T) {
	f := newFixture(t, true, fence("b", v1alpha1.PhaseFencing))
	f.reportWhere(t, "the watchdog is armed and b held", func(r Report) bool { return r.Watchdog.Armed && len(r.Holds) == 1 })
	want := map[string]float64{"watchdog_armed": 1, "watchdog_feeding": 1, "read_failing": 0, "holds": 1, "peers_answering": 0, "peers_alive": 0, "peer_questions_total": 0}
	got := gather(t, f.agent)
	for name, v := range want {
		if got[name] != v {
			t.Errorf("kubefence_node_agent_%s = %v, want %v", name, got[name], v)
		}
	}
	if got["last_read_timestamp_seconds"] < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last read at %v, want within the last minute", got["last_read_timestamp_seconds"])
	}
	f.readErr.Store(true)
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		m := gather(t, f.agent)
		return m["read_failing"] == 1 && m["watchdog_feeding"] == 0, nil
	}); err != nil {
		t.Errorf("reads failing past isolation: metrics %v, want read_failing 1 and feeding 0", gather(t, f.agent))
	}
}

func gather(t *testing.T, a *Agent) map[string]float64 {
	t.Helper()
	mfs, err := a.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		v := m.GetGauge().GetValue()
		if c := m.GetCounter(); c != nil {
			v = c.GetValue()
		}
		out[strings.TrimPrefix(mf.GetName(), "kubefence_node_agent_")] = v
	}
	return out
}
