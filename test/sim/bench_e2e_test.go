package sim

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// benchResult is one profile's measurements.
type benchResult struct {
	profile      string
	nodes        int
	singles      []Recovery
	batch        []Recovery
	alone        *StuckPod
	violations   []string
	startup      time.Duration
	settings     string
	batchSize    int
	stormCrashAt time.Time
	heartbeats   bool
	window       time.Duration
}

// benchOptions are one profile's run.
type benchOptions struct {
	profile                   string
	nodes, singles, batch     int
	window                    time.Duration
	heartbeats                bool          // node agents with peers, the controller seated among them
	peerProbe                 time.Duration // their probe interval
	agentIsolation, agentRead time.Duration
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestBenchmarkReport measures recovery times on a large simulated cluster and writes
// docs/benchmarks.md. It runs only when asked (make bench-report):
//
//	KUBEFENCE_BENCH_REPORT=docs/benchmarks.md go test -run TestBenchmarkReport -timeout 60m ./test/sim
//
// KUBEFENCE_BENCH_NODES (100), KUBEFENCE_BENCH_SINGLES (5), KUBEFENCE_BENCH_BATCH (20) and
// KUBEFENCE_BENCH_WINDOW_MIN (7) size the default profile; KUBEFENCE_BENCH_FAST_NODES (100),
// KUBEFENCE_BENCH_FAST_SINGLES (10) and KUBEFENCE_BENCH_HEARTBEAT_BATCH (5) the fast ones.
// The fast profile with heartbeats runs one fence-node-agent process per node, all on
// this machine. KUBEFENCE_BENCH_PROFILES=fast,heartbeats runs only some profiles.
func TestBenchmarkReport(t *testing.T) {
	out := os.Getenv("KUBEFENCE_BENCH_REPORT")
	if out == "" {
		t.Skip("set KUBEFENCE_BENCH_REPORT=<path> to run the benchmark report")
	}
	nodes := envInt("KUBEFENCE_BENCH_NODES", 100)
	singles := envInt("KUBEFENCE_BENCH_SINGLES", 5)
	batch := envInt("KUBEFENCE_BENCH_BATCH", 20)
	window := time.Duration(envInt("KUBEFENCE_BENCH_WINDOW_MIN", 7)) * time.Minute
	fastNodes := envInt("KUBEFENCE_BENCH_FAST_NODES", 100)
	fastSingles := envInt("KUBEFENCE_BENCH_FAST_SINGLES", 10)
	only := os.Getenv("KUBEFENCE_BENCH_PROFILES") // for trying one profile: default,fast,heartbeats
	run := func(name string) bool { return only == "" || slices.Contains(strings.Split(only, ","), name) }
	var def, fast, hb *benchResult
	if run("default") {
		def = benchProfile(t, benchOptions{profile: ProfileDefault, nodes: nodes, singles: singles, batch: batch, window: window})
	}
	// The fast profile twice, on clusters of the same size, one after the other: the
	// Lease-only detector, then node agents with heartbeats (the agents' own defaults:
	// isolation 10s, a read every 2s; peers probed every 200ms).
	if run("fast") {
		fast = benchProfile(t, benchOptions{profile: ProfileFast, nodes: fastNodes, singles: fastSingles})
	}
	if run("heartbeats") {
		hb = benchProfile(t, benchOptions{profile: ProfileFast, nodes: fastNodes, singles: fastSingles,
			batch: envInt("KUBEFENCE_BENCH_HEARTBEAT_BATCH", 5), heartbeats: true,
			peerProbe: 200 * time.Millisecond, agentIsolation: 10 * time.Second, agentRead: 2 * time.Second})
	}
	doc := benchDoc(def, fast, hb, only)
	if !filepath.IsAbs(out) {
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		out = filepath.Join(root, out)
	}
	// The report owns its section of the file; the rest (make bench-realnode's section,
	// notes measured otherwise) stays as it is.
	old, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	doc = WithSection(string(old), SimulatedSection, doc)
	if err := os.WriteFile(out, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s:\n%s", out, doc)
	for _, r := range []*benchResult{def, fast, hb} {
		if r == nil {
			continue
		}
		for _, v := range r.violations {
			t.Errorf("invariant (%s): %s", r.name(), v)
		}
	}
}

// benchProfile runs one profile in a subtest of its own, so that its cluster stops (the
// subtest's cleanups) before the next profile's starts: the three clusters of a report,
// all up at once at the end, overloaded two cores.
func benchProfile(t *testing.T, o benchOptions) *benchResult {
	t.Helper()
	var res *benchResult
	name := fmt.Sprintf("%s-%d-nodes", o.profile, o.nodes)
	if o.heartbeats {
		name += "-heartbeats"
	}
	if !t.Run(name, func(t *testing.T) { res = runProfile(t, o) }) {
		t.FailNow()
	}
	return res
}

func runProfile(t *testing.T, o benchOptions) *benchResult {
	t.Helper()
	res := &benchResult{profile: o.profile, nodes: o.nodes, batchSize: o.batch, heartbeats: o.heartbeats, window: o.window}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	began := time.Now()
	fast := o.profile == ProfileFast
	h, err := StartHarness(ctx, HarnessOptions{
		Dir: t.TempDir(), Nodes: o.nodes, BinDir: scenarioBinaries(t),
		Logf: func(f string, a ...any) {
			if !strings.Contains(f, "pod %s/%s") && !strings.Contains(f, "volume") {
				t.Logf(f, a...)
			}
		},
		Cluster: func(co *Options) {
			if fast {
				// The kubelet's own nodeStatusUpdateFrequency (10s): only the Lease
				// renews faster. A status every 2s from 100 kubelets, fanned out to 100
				// node agents' watches of the Nodes, was most of the API server's load.
				co.LeaseRenewInterval, co.StatusUpdateInterval = 2*time.Second, 10*time.Second
			}
		},
		Config: func(c *v1alpha1.Config) {
			if fast {
				c.Detection.LeaseStaleAfter = metav1.Duration{Duration: 10 * time.Second}
				c.Detection.NotReadyAfter = metav1.Duration{Duration: 10 * time.Second}
			}
		},
	})
	if err != nil {
		t.Fatalf("start %d-node harness: %v", o.nodes, err)
	}
	stopOnCleanup(t, h, false)
	res.settings = fmt.Sprintf("kubelet Lease renewed every %s, node status every %s, leaseStaleAfter %s, notReadyAfter %s, leader election %s/%s/%s, kube-controller-manager flags at their defaults",
		h.Cluster.opts.LeaseRenewInterval, h.Cluster.opts.StatusUpdateInterval, h.Config.Detection.LeaseStaleAfter.Duration, h.Config.Detection.NotReadyAfter.Duration,
		h.Config.LeaderElection.LeaseDuration.Duration, h.Config.LeaderElection.RenewDeadline.Duration, h.Config.LeaderElection.RetryPeriod.Duration)
	var agents *NodeAgents
	var seat []string
	if o.heartbeats {
		agents, seat = startBenchAgents(t, ctx, h, o)
		res.settings += fmt.Sprintf("; a fence-node-agent per node (--isolation %s, --read-interval %s, --peer-probe-interval %s, an emulated watchdog), heartbeats.probeInterval %s, heartbeats.kubeletTimeout %s",
			o.agentIsolation, o.agentRead, o.peerProbe, h.Config.Heartbeats.ProbeInterval.Duration, h.Config.Heartbeats.KubeletTimeout.Duration)
	}
	res.startup = time.Since(began)
	t.Logf("%d-node %s cluster with %d ipmi_sim BMCs up in %s", o.nodes, res.name(), len(h.BMCs), res.startup.Round(time.Second))
	c := h.Cluster
	replicas := max(o.batch, 1) + 1
	if err := c.DeploySpreadStatefulSet(ctx, "web", replicas); err != nil {
		t.Fatal(err)
	}
	rec := startRecorder(t, ctx, c)
	monCtx, monCancel := context.WithCancel(ctx)
	mon, err := StartMonitor(monCtx, h, nil, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	disturbed := map[string]bool{}
	var alone string
	var aloneAt time.Time
	if o.window > 0 {
		// Kubernetes alone, on the same cluster at the same time: this node is excluded from
		// kubefence and nothing else will fence it.
		alone = podNodeOrFail(t, ctx, c, fmt.Sprintf("web-%d", replicas-1))
		labelNode(t, ctx, c, alone, v1alpha1.DefaultExcludeLabel, "bench")
	}
	leader := startLeader(t, ctx, h, "fence-controller", seat...)
	// A node dies: its kubelet stops while the machine runs on (its BMC says on). With
	// node agents the whole machine dies, its agent with it.
	kill := func(node string) { c.Node(node).Crash() }
	if agents != nil {
		kill = agents.Halt
		waitHeartbeatsReady(t, ctx, leader, o.nodes)
	}
	if alone != "" {
		disturbed[alone] = true
		kill(alone)
		aloneAt = time.Now()
		t.Logf("Kubernetes alone: crashed excluded node %s at %s", alone, aloneAt.Format(time.RFC3339))
	}
	for i := range o.singles {
		victims := pickVictims(t, ctx, c, 1, disturbed)
		rs := crashAndMeasure(t, ctx, c, rec, victims, disturbed, kill)
		t.Logf("single failure %d: %+v", i+1, rs[0])
		res.singles = append(res.singles, rs...)
	}
	if o.batch > 0 {
		victims := pickVictims(t, ctx, c, o.batch, disturbed)
		res.batch = crashAndMeasure(t, ctx, c, rec, victims, disturbed, kill)
		for _, r := range res.batch {
			t.Logf("batch: %+v", r)
		}
	}
	if alone != "" {
		if err := sleepUntil(ctx, aloneAt.Add(o.window)); err != nil {
			t.Fatal(err)
		}
		stuck, err := ObserveStuckPod(ctx, c, rec, alone, fmt.Sprintf("web-%d", replicas-1), aloneAt)
		if err != nil {
			t.Fatal(err)
		}
		res.alone = &stuck
		t.Logf("Kubernetes alone after %s: %+v", o.window, stuck)
	}
	monCancel()
	mon.Wait()
	ev, err := GatherEvidence(ctx, h, rec, disturbed)
	if err != nil {
		t.Fatal(err)
	}
	if agents != nil {
		ev.Resets, ev.Halts = agents.Resets(), agents.Halts()
	}
	// The excluded node's pod is marked by Kubernetes' own taint eviction, not kubefence.
	ev.Seen = slices.DeleteFunc(ev.Seen, func(s Seen) bool { return s.Node == alone && alone != "" })
	res.violations = mon.Check(ev)
	return res
}

// startBenchAgents starts a node agent on every node, answering each other, and seats
// the controller among them; it returns the agents and the controller's seat flags.
func startBenchAgents(t *testing.T, ctx context.Context, h *Harness, o benchOptions) (*NodeAgents, []string) {
	t.Helper()
	agents, err := StartNodeAgents(ctx, h, NodeAgentOptions{Bin: filepath.Join(h.bin, "fence-node-agent"),
		Isolation: o.agentIsolation, ReadInterval: o.agentRead, WatchdogTimeout: 5 * time.Second, Peers: true, PeerProbe: o.peerProbe, Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agents.Stop)
	if err := agents.WaitReports(ctx, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	err = h.RewriteConfig(func(c *v1alpha1.Config) {
		c.Heartbeats = &v1alpha1.Heartbeats{KeyFile: agents.key, ProbeInterval: metav1.Duration{Duration: o.peerProbe},
			KubeletTimeout: metav1.Duration{Duration: 500 * time.Millisecond}}
		c.Watchdog.Isolation = metav1.Duration{Duration: o.agentIsolation}
		c.Watchdog.AllowEmulated = true // the simulation's watchdogs are emulated
	})
	if err != nil {
		t.Fatal(err)
	}
	seat, err := agents.SeatArgs("fence-controller")
	if err != nil {
		t.Fatal(err)
	}
	return agents, seat
}

// waitHeartbeatsReady waits until the leader's seat sees every agent and it has measured
// every node's renewal cadence: before then heartbeat evidence cannot act.
func waitHeartbeatsReady(t *testing.T, ctx context.Context, leader *Replica, nodes int) {
	t.Helper()
	url := metricsURL(t, ctx, leader)
	var agents, measured float64
	err := pollUntil(ctx, 500*time.Millisecond, 2*time.Minute, func(ctx context.Context) (bool, error) {
		m := scrape(ctx, url)
		agents, measured = metricValue(m, "kubefence_heartbeat_agents"), metricValue(m, "kubefence_heartbeat_measured_nodes")
		return int(agents) == nodes && int(measured) == nodes, nil
	})
	if err != nil {
		t.Fatalf("heartbeats not ready for %d nodes: the seat sees %.0f agents, %.0f cadences measured: %v", nodes, agents, measured, err)
	}
}

// name is the profile's name in the report.
func (r *benchResult) name() string {
	if r.heartbeats {
		return r.profile + " profile with heartbeats"
	}
	return r.profile + " profile"
}

func labelNode(t *testing.T, ctx context.Context, c *Cluster, node, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pickVictims returns n nodes, each running one web pod now, that were not harmed yet.
func pickVictims(t *testing.T, ctx context.Context, c *Cluster, n int, disturbed map[string]bool) map[string]string {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	victims := map[string]string{}
	for _, p := range pods.Items {
		if len(victims) == n {
			break
		}
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && !disturbed[p.Spec.NodeName] {
			victims[p.Spec.NodeName] = p.Name
		}
	}
	if len(victims) < n {
		t.Fatalf("only %d running web pods on unharmed nodes, want %d", len(victims), n)
	}
	return victims
}

// crashAndMeasure kills every victim at once and waits until
// each one's pod runs elsewhere.
func crashAndMeasure(t *testing.T, ctx context.Context, c *Cluster, rec *Recorder, victims map[string]string, disturbed map[string]bool, kill func(node string)) []Recovery {
	t.Helper()
	crashed := map[string]time.Time{}
	for node := range victims {
		disturbed[node] = true
		kill(node)
		crashed[node] = time.Now()
	}
	err := pollUntil(ctx, 250*time.Millisecond, 6*time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, nil
		}
		for node, pod := range victims {
			ok := false
			for _, p := range pods.Items {
				if p.Name == pod && p.Spec.NodeName != node && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
					ok = true
				}
			}
			if !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("pods of %v did not move: %v", victims, err)
	}
	var out []Recovery
	for node, pod := range victims {
		out = append(out, MeasureRecovery(ctx, c, rec, node, pod, crashed[node]))
	}
	return out
}

func benchDoc(def, fast, hb *benchResult, only string) string {
	var b strings.Builder
	env := []string{"KUBEFENCE_BENCH_REPORT=docs/benchmarks.md"}
	if only != "" {
		env = append(env, "KUBEFENCE_BENCH_PROFILES="+only)
	}
	if def != nil {
		env = append(env, fmt.Sprintf("KUBEFENCE_BENCH_NODES=%d KUBEFENCE_BENCH_SINGLES=%d KUBEFENCE_BENCH_BATCH=%d KUBEFENCE_BENCH_WINDOW_MIN=%d",
			def.nodes, len(def.singles), def.batchSize, int(def.window.Minutes())))
	}
	if f := cmp.Or(fast, hb); f != nil {
		env = append(env, fmt.Sprintf("KUBEFENCE_BENCH_FAST_NODES=%d KUBEFENCE_BENCH_FAST_SINGLES=%d", f.nodes, len(f.singles)))
	}
	if hb != nil {
		env = append(env, fmt.Sprintf("KUBEFENCE_BENCH_HEARTBEAT_BATCH=%d", hb.batchSize))
	}
	fmt.Fprintf(&b, `## From a node's death to its pod running elsewhere, simulated clusters

Generated by the benchmark test on %s; do not edit by hand. Regenerate with `+"`make bench-report`"+`,
which runs:

    %s go test -count=1 -timeout 90m -run TestBenchmarkReport ./test/sim

Machine: %s.

What is measured: the time from a node's death to its StatefulSet pod Running and Ready on
another node, on the simulated cluster of test/sim: real etcd, kube-apiserver,
kube-controller-manager and kube-scheduler (v1.36.3), one simulated kubelet per node, one
real ipmi_sim BMC per node, and one fence-controller replica. A death is the kubelet stopping
while the machine keeps running, so its BMC still says on; with node agents, the whole
machine stopping, its agent with it (the BMC still says on). Each StatefulSet pod has a
read-write-once CSI volume, so without a verified fence it cannot start elsewhere
(Multi-Attach). Phases: **detect** (death → incident Detected), **decide** (→ FenceStarted),
**fence** (→ the IPMI agent returned from power off), **verify** (→ power read back off,
Verified), **remediate** (→ the pod deleted, seen by an independent watcher: the pod is
released), **reschedule** (→ the new pod Running on another node, seen by that watcher). The
first four ends come from the NodeFence timeline, the last two from the watcher
(test/sim/recorder.go); all clocks are the same machine's.

`, time.Now().UTC().Format("2006-01-02 15:04 UTC"), strings.Join(env, " "), MachineInfo())
	if def != nil {
		fmt.Fprintf(&b, "### Default settings, %d-node simulated cluster\n\nSettings: %s. The %d-node cluster with %d ipmi_sim BMCs started in %s.\n\n",
			def.nodes, def.settings, def.nodes, def.nodes, def.startup.Round(time.Second))
		fmt.Fprintf(&b, "#### 1 failure (%d runs, one after another on the same cluster, each on a different node)\n\n%s\n%s\n",
			len(def.singles), SummaryTable(def.singles), RecoveryRows(def.singles))
		if len(def.batch) > 0 {
			fmt.Fprintf(&b, "#### %d simultaneous failures (1 run: %d nodes, each running one StatefulSet pod, crashed together)\n\n%s\n%s\n",
				def.batchSize, len(def.batch), SummaryTable(def.batch), RecoveryRows(def.batch))
		}
		if a := def.alone; a != nil {
			writeAlone(&b, a)
		}
	}
	for _, r := range []*benchResult{fast, hb} {
		if r == nil {
			continue
		}
		title := "Fast profile"
		if r.heartbeats {
			title = "Fast profile with node agents and heartbeats"
		}
		fmt.Fprintf(&b, "### %s, %d-node simulated cluster\n\nSettings: %s. Started in %s.\n\n#### 1 failure (%d runs)\n\n%s\n%s\n",
			title, r.nodes, r.settings, r.startup.Round(time.Second), len(r.singles), SummaryTable(r.singles), RecoveryRows(r.singles))
		if len(r.batch) > 0 {
			fmt.Fprintf(&b, "#### %d simultaneous failures (1 run)\n\n%s\n%s\n", r.batchSize, SummaryTable(r.batch), RecoveryRows(r.batch))
		}
	}
	if fast != nil && hb != nil {
		b.WriteString(heartbeatRatio(fast, hb))
	}
	b.WriteString(`### Notes

- Percentiles are nearest-rank over the runs listed: with 10 runs or fewer, p99 is the
  slowest run; with simultaneous failures, the slowest node of one run.
- Without heartbeats detection dominates: it is leaseStaleAfter minus the time since the
  node's last Lease renewal, plus the detector's tick. Everything kubefence does after
  detection (decide, fence, verify, remediate) takes about 1–3s even for 20 nodes at once.
- With heartbeats, detection is the later of the agent declared gone by its peers (SWIM:
  probe, indirect probes, then a suspicion that shortens as more peers confirm it) and the
  Lease silent for 1.5 of its measured renewal gaps, then one probe of the kubelet's port
  (docs/safety-model.md section 10).
- The single-failure runs follow one another, so their crash times are not spread uniformly
  over the kubelets' renewal cycle; the figures are indicative, not a distribution.
- With heartbeats every node runs a fence-node-agent process, all on this 2-core machine
  beside the control plane, the BMCs and the controller. An agent took 0.6–0.9% of a core
  in 30-second CPU profiles at 100 nodes (memberlist's probes and answers, its reads of
  the API server), so the phases after detection (decide, fence, verify,
  remediate) take longer than in the Lease-only run, where nothing else competes; on
  machines of their own they would not share the control plane's cores.

`)
	b.WriteString("### Safety during the runs\n\n")
	var all []string
	for _, r := range []*benchResult{def, fast, hb} {
		if r != nil {
			all = append(all, r.violations...)
		}
	}
	if len(all) == 0 {
		b.WriteString("The invariant checker (test/sim/invariants.go) watched every run: no pod deleted, no volume attachment removed and no out-of-service taint added before the node's BMC logged the power off; no StatefulSet pod running on two powered machines at once; no healthy node touched; no power action on a node whose kubelet was renewing; at most one open incident per node.\n")
	} else {
		b.WriteString("The invariant checker found violations:\n\n")
		for _, v := range all {
			fmt.Fprintf(&b, "- %s\n", v)
		}
	}
	return b.String()
}

// heartbeatRatio compares the fast profile with and without heartbeats: crash to the pod
// released (deleted from the dead node) and to the pod running elsewhere.
func heartbeatRatio(fast, hb *benchResult) string {
	var b strings.Builder
	leaseRuns, hbRuns := fast.singles, append(slices.Clone(hb.singles), hb.batch...)
	fmt.Fprintf(&b, `#### Heartbeats against the Lease-only detector, same run

Both clusters had %d nodes and the same fast profile, one after the other in the same run
of the benchmark; the heartbeat figures pool the single failures and the simultaneous ones
(%d deaths), the Lease-only ones are its %d single failures.

| | Lease only | heartbeats | ratio |
|---|---|---|---|
`, hb.nodes, len(hbRuns), len(leaseRuns))
	for _, row := range []struct {
		what string
		of   func(Recovery) time.Duration
	}{{"detected", func(r Recovery) time.Duration { return r.Phases["detect"] }}, {"released", Released},
		{"running elsewhere", func(r Recovery) time.Duration { return r.Total }}} {
		for _, p := range []float64{50, 99} {
			l, h := Percentile(durations(leaseRuns, row.of), p), Percentile(durations(hbRuns, row.of), p)
			ratio := "n/a"
			if h > 0 {
				ratio = fmt.Sprintf("%.1f×", l.Seconds()/h.Seconds())
			}
			fmt.Fprintf(&b, "| crash → %s, p%.0f | %s | **%s** | %s |\n", row.what, p, fmtSecs(l), fmtSecs(h), ratio)
		}
	}
	b.WriteString("\n")
	return b.String()
}

// durations is of applied to every measured recovery.
func durations(rs []Recovery, of func(Recovery) time.Duration) []time.Duration {
	var out []time.Duration
	for _, r := range rs {
		if r.Missing == "" {
			out = append(out, of(r))
		}
	}
	return out
}

func writeAlone(b *strings.Builder, a *StuckPod) {
	verdict := "stayed **stuck**"
	if a.RunningElsewhere {
		verdict = "ran elsewhere"
	}
	marked := "never marked for deletion"
	if a.MarkedAfter > 0 {
		marked = fmt.Sprintf("marked for deletion (DisruptionTarget / deletionTimestamp by taint eviction) %s after the death", fmtSecs(a.MarkedAfter))
	}
	term := ""
	if a.Terminating {
		term = ", Terminating"
	}
	fmt.Fprintf(b, `#### Kubernetes alone, same cluster, same time

One more node (%s, running %s) was labelled %s, so kubefence leaves it alone, and crashed the
same way at the start of the runs above. Kubernetes (kube-controller-manager at its defaults)
marked the node NotReady %s after the death and the pod was %s. After a window of %s the pod
%s: still bound to %s, phase %s%s, no copy running elsewhere. A pod with a read-write-once
volume on a node that may still run is never force-deleted by Kubernetes itself.

`, a.Node, a.Pod, "`"+v1alpha1.DefaultExcludeLabel+"`", fmtSecs(a.NotReadyAfter), marked, a.Window.Round(time.Second), verdict, a.NodeAtClose, a.Phase, term)
}
