package nodeagentwatch

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/selffence"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

// incidentsOf is the incident record as a map by name.
type incidentsOf map[string]*v1alpha1.NodeFence

func (m incidentsOf) Get(name string) *v1alpha1.NodeFence { return m[name] }

// enqueued records the nodes the watch asks the incident loop to look at.
type enqueued chan string

func newEnqueued() enqueued { return make(enqueued, 100) }

func (e enqueued) add(node string) { e <- node }

// take returns the nodes asked for since last asked, in order.
func (e enqueued) take() []string {
	var out []string
	for {
		select {
		case n := <-e:
			out = append(out, n)
		default:
			return out
		}
	}
}

// counterOf is the counter name{labels} in reg; 0 when it has no such series.
func counterOf(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	fixture.Must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if len(got) == len(labels) && func() bool {
				for k, v := range labels {
					if got[k] != v {
						return false
					}
				}
				return true
			}() {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// report is node's agent's report Lease in cfg's namespace, resourceVersion rv, armed
// with a device watchdog among node-1..3, holding the incidents holds (sorted, as an
// agent writes them).
func report(t *testing.T, cfg *v1alpha1.Config, node, rv string, holds ...string) *coordinationv1.Lease {
	t.Helper()
	r := nodeagent.Report{BootID: "boot-" + node, Isolation: "10s", ReportInterval: "30s", Holds: holds,
		Members: nodeagent.MembersOf([]string{"node-1", "node-2", "node-3"}), Watchdog: nodeagent.WatchdogReport{Kind: watchdog.KindDevice, Armed: true, Timeout: "5s"}}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Watchdog.Namespace, Name: nodeagent.LeaseName(node), ResourceVersion: rv}}
	fixture.Must(t, r.Encode(l, node))
	return l
}

// TestObserveReportAsksTheLoop: with a watchdog level, a node agent's report asks the
// incident loop to look at its node, and at the nodes of the incidents it newly holds;
// a resync of the same report holds nothing new. Without a watchdog level or heartbeats
// the report is kept (a sign of the node's life) but asks for nothing.
func TestObserveReportAsksTheLoop(t *testing.T) {
	held := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-2-x1"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "node-2"}}
	for name, tc := range map[string]struct {
		cfg        *v1alpha1.Config
		first, got []string
	}{
		"watchdog level": {cfg: watchdogConfig(), first: []string{"node-1", "node-2"}, got: []string{"node-1"}},
		"neither":        {cfg: func() *v1alpha1.Config { c := &v1alpha1.Config{}; c.Default(); return c }()},
	} {
		t.Run(name, func(t *testing.T) {
			clk, e := fixture.NewClock(t0), newEnqueued()
			w := newWatch(t, tc.cfg, clk, e.add).w
			w.incidents = incidentsOf{held.Name: held}
			w.ObserveReport(report(t, tc.cfg, "node-1", "1", "gone-x1", held.Name))
			if got := e.take(); !slices.Equal(got, tc.first) {
				t.Errorf("first report asked for %v, want %v", got, tc.first)
			}
			w.ObserveReport(report(t, tc.cfg, "node-1", "1", "gone-x1", held.Name))
			if got := e.take(); !slices.Equal(got, tc.got) {
				t.Errorf("a resync asked for %v, want %v", got, tc.got)
			}
			if s := w.Signs("node-1", clk.Now()); !s.Agent.At.Equal(t0) {
				t.Errorf("the report seen at %s, want %s", s.Agent.At, t0)
			}
		})
	}
}

// TestWatchFollowsReportsAndIncidents: the watch follows the report Leases and the
// incidents through the shared caches: a report is kept when the watch brings it and
// dropped with its Lease; an incident's holders are dropped with the incident.
func TestWatchFollowsReportsAndIncidents(t *testing.T) {
	cfg := watchdogConfig()
	clk, e := fixture.NewClock(t0), newEnqueued()
	p := newWatch(t, cfg, clk, e.add)
	w := p.w
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fixture.Must(t, p.set.Start(ctx))
	leases := p.kube.CoordinationV1().Leases(cfg.Watchdog.Namespace)
	l := report(t, cfg, "node-1", "", "node-1-x1")
	_, err := leases.Create(ctx, l, metav1.CreateOptions{})
	fixture.Must(t, err)
	fixture.PollUntil(t, "the report kept", func() bool { return !w.Signs("node-1", clk.Now()).Agent.At.IsZero() })
	if got := e.take(); !slices.Equal(got, []string{"node-1"}) {
		t.Errorf("the report asked for %v, want node-1", got)
	}
	w.watchdogs.mu.Lock()
	_, holds := w.watchdogs.held["node-1-x1"]
	w.watchdogs.mu.Unlock()
	if !holds {
		t.Error("node-1's hold of node-1-x1 not kept")
	}
	fixture.Must(t, leases.Delete(ctx, l.Name, metav1.DeleteOptions{}))
	fixture.PollUntil(t, "the report dropped", func() bool { return w.Signs("node-1", clk.Now()).Agent.At.IsZero() })

	nfs := p.fencing.FencingV1alpha1().NodeFences()
	_, err = nfs.Create(ctx, &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-1-x1"}}, metav1.CreateOptions{})
	fixture.Must(t, err)
	fixture.Must(t, nfs.Delete(ctx, "node-1-x1", metav1.DeleteOptions{}))
	fixture.PollUntil(t, "the incident's holders dropped", func() bool {
		w.watchdogs.mu.Lock()
		defer w.watchdogs.mu.Unlock()
		_, ok := w.watchdogs.held["node-1-x1"]
		return !ok
	})
}

// heartbeatsConfig is a configuration with heartbeats on, their key in the test's
// directory.
func heartbeatsConfig(t *testing.T) *v1alpha1.Config {
	cfg := &v1alpha1.Config{Heartbeats: fixture.Heartbeats(t)}
	cfg.Default()
	return cfg
}

// TestSigns: the signs of a node's life this replica saw, for a person's confirm-off:
// the agent's latest report, for the duration its Lease states (else the report's
// maximum age), and with heartbeats the kubelet's latest answer, for two kubelet check
// intervals.
func TestSigns(t *testing.T) {
	clk := fixture.NewClock(t0)
	cfg := heartbeatsConfig(t)
	p := newWatch(t, cfg, clk, func(string) {})
	l := report(t, cfg, "node-1", "1")
	secs := int32(40)
	l.Spec.LeaseDurationSeconds = &secs
	p.w.ObserveReport(l)
	p.det.ObserveKubeletProbe("node-1", t0.Add(time.Second), true)
	s := p.w.Signs("node-1", t0.Add(time.Minute))
	if !s.At.Equal(t0.Add(time.Minute)) || !s.Agent.At.Equal(t0) || s.Agent.For != 40*time.Second {
		t.Errorf("signs at %s, agent %+v; want at +1m, the report at t0 for 40s", s.At, s.Agent)
	}
	if want := 2 * cfg.Heartbeats.KubeletCheckInterval.Duration; !s.Probe.At.Equal(t0.Add(time.Second)) || s.Probe.For != want {
		t.Errorf("probe %+v, want the answer at t0+1s for %s", s.Probe, want)
	}

	off := &v1alpha1.Config{}
	off.Default()
	if s := newWatch(t, off, clk, func(string) {}).w.Signs("node-1", t0); !s.Probe.At.IsZero() || s.Probe.For != 0 || !s.Agent.At.IsZero() {
		t.Errorf("without heartbeats or a report: signs %+v, want none", s)
	}
}

// TestVerdictReadsTheMembers: the watchdog verdict counts the cluster's Nodes from the
// cache; a node whose agent never reported cannot be counted on.
func TestVerdictReadsTheMembers(t *testing.T) {
	clk := fixture.NewClock(t0)
	cfg := watchdogConfig()
	p := newWatch(t, cfg, clk, func(string) {})
	nodes := p.set.Kube.Core().V1().Nodes().Informer().GetIndexer()
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		fixture.Must(t, nodes.Add(member(n)))
	}
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-1-x1", CreationTimestamp: metav1.NewTime(t0.Add(10 * time.Second))}}
	v, err := p.w.Verdict(nf, member("node-1"), false)
	if err != nil || v.State != selffence.Ineligible || !strings.Contains(v.Reason, "no report from its node agent") {
		t.Errorf("verdict %s (%s), %v; want Ineligible for want of a report", v.State, v.Reason, err)
	}
	p.w.ObserveReport(report(t, cfg, "node-1", "1")) // armed before the fence started
	clk.Set(t0.Add(time.Minute))
	if v, err := p.w.Verdict(nf, member("node-1"), false); err != nil || v.State == selffence.Ineligible {
		t.Errorf("verdict with node-1's report read: %s (%s), %v; want it eligible", v.State, v.Reason, err)
	}
	p.w.ObserveReport(report(t, cfg, "node-2", "1"))
	fixture.Must(t, nodes.Delete(member("node-3")))
	if v, _ := p.w.Verdict(nf, member("node-2"), false); v.State != selffence.Ineligible || !strings.Contains(v.Reason, "member list") {
		t.Errorf("verdict with a Node gone from the cache: %s (%s), want Ineligible on the member list", v.State, v.Reason)
	}
}

// TestProbeKubelet: the incident loop's probe of a kubelet answers whether heartbeats
// are on; with them, the probe is counted by result, and a node with no address is not
// probed at all (no evidence, so no verdict).
func TestProbeKubelet(t *testing.T) {
	ctx := context.Background()
	clk := fixture.NewClock(t0)
	off := &v1alpha1.Config{}
	off.Default()
	if newWatch(t, off, clk, func(string) {}).w.ProbeKubelet(ctx, member("node-1"), t0) {
		t.Error("a probe without heartbeats")
	}
	cfg := heartbeatsConfig(t)
	cfg.Heartbeats.KubeletTimeout.Duration = 200 * time.Millisecond
	p := newWatch(t, cfg, clk, func(string) {})
	if !p.w.ProbeKubelet(ctx, member("node-1"), t0) {
		t.Error("heartbeats on, yet no probe")
	}
	kubelet := fixture.AnsweringKubelet(t)
	for name, tc := range map[string]struct {
		node     *corev1.Node
		answered bool
	}{
		"node-2": {fixture.WithKubelet(t, member("node-2"), kubelet.Listener.Addr().String()), true},
		"node-3": {fixture.WithKubelet(t, member("node-3"), fixture.SilentKubelet(t)), false},
	} {
		p.w.ProbeKubelet(ctx, tc.node, t0)
		if got := !p.det.KubeletAnswered(name).IsZero(); got != tc.answered {
			t.Errorf("%s: kubelet heard %v, want %v", name, got, tc.answered)
		}
	}
	for labels, want := range map[[2]string]float64{
		{"node-1", probeAnswered}: 0, {"node-1", probeSilent}: 0,
		{"node-2", probeAnswered}: 1, {"node-3", probeSilent}: 1,
	} {
		if got := counterOf(t, p.reg, "kubefence_kubelet_probes_total", map[string]string{"node": labels[0], "result": labels[1]}); got != want {
			t.Errorf("kubefence_kubelet_probes_total%v = %v, want %v", labels, got, want)
		}
	}
}

// TestStartRefusesBadHeartbeats: a seat that cannot be taken as configured is an error
// naming the field, not a replica that silently never hears the agents.
func TestStartRefusesBadHeartbeats(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*v1alpha1.Heartbeats)
		want   string
	}{
		"no key file":       {func(h *v1alpha1.Heartbeats) { h.KeyFile += ".missing" }, "heartbeats.keyFile"},
		"bind address":      {func(h *v1alpha1.Heartbeats) { h.BindAddress = "127.0.0.1" }, "heartbeats.bindAddress"},
		"advertise address": {func(h *v1alpha1.Heartbeats) { h.AdvertiseAddress = "10.0.0.1:port" }, "heartbeats.advertiseAddress"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := heartbeatsConfig(t)
			tc.change(cfg.Heartbeats)
			err := newWatch(t, cfg, fixture.NewClock(t0), func(string) {}).w.Start(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("start = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestNoSeatWithoutHeartbeats: without heartbeats the watch takes no seat: there is no
// agent to call gone and no goodbye to count.
func TestNoSeatWithoutHeartbeats(t *testing.T) {
	cfg := &v1alpha1.Config{}
	cfg.Default()
	p := newWatch(t, cfg, fixture.NewClock(t0), func(string) {})
	fixture.Must(t, p.w.Start(context.Background()))
	if p.w.Seat() != nil {
		t.Error("a seat without heartbeats")
	}
	p.w.ObserveAgent("node-1")
	if at := p.w.agentLeft("node-1"); !at.IsZero() {
		t.Errorf("a goodbye at %s without a seat", at)
	}
}
