package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/testpoint"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// Names the scenario runner gives to what it installs.
const (
	// ZoneLabel is the node label of a zone.
	ZoneLabel = "topology.kubernetes.io/zone"
	// InitiatorKey is the node annotation naming the node's iSCSI initiator IQN.
	InitiatorKey = "fencing.kubefence.io/iscsi-initiator"
	iscsiAgent   = "iscsi"
)

// RunOptions configures RunScenario.
type RunOptions struct {
	// Dir is the work directory; the caller owns it.
	Dir string
	// BinDir holds fence-controller, fence-agent-ipmi and fence-agent-iscsi; empty means
	// build them into Dir (BuildScenarioBinaries).
	BinDir string
	Logf   func(format string, args ...any)
}

// Report is what a scenario run found.
type Report struct {
	Scenario string
	// Steps is what the runner did, with times from the start of the steps.
	Steps []string
	// Failures are expectations that were not met.
	Failures []string
	// Violations are broken safety invariants.
	Violations []string
	// Leftover names processes still alive after the run stopped everything.
	Leftover []string
	Elapsed  time.Duration
}

// OK reports whether the scenario met its expectations and broke no invariant.
func (r *Report) OK() bool {
	return len(r.Failures) == 0 && len(r.Violations) == 0 && len(r.Leftover) == 0
}

// String summarises the report for a log.
func (r *Report) String() string {
	var b strings.Builder
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "scenario %s: %s in %s\n", r.Scenario, verdict, r.Elapsed.Round(100*time.Millisecond))
	for _, s := range r.Steps {
		fmt.Fprintf(&b, "  step   %s\n", s)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(&b, "  EXPECT %s\n", f)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  INVARIANT %s\n", v)
	}
	for _, l := range r.Leftover {
		fmt.Fprintf(&b, "  LEAK   %s\n", l)
	}
	return b.String()
}

// BuildScenarioBinaries builds the controller, the IPMI and iSCSI agents and the node
// agent into dir, the controller with its test pause points (Scenario.PauseAt,
// testpoint.BuildTag), which the release leaves out.
func BuildScenarioBinaries(ctx context.Context, dir string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", testpoint.BuildTag, "-o", dir+string(os.PathSeparator),
		"./cmd/fence-controller", "./cmd/fence-agent-ipmi", "./cmd/fence-agent-iscsi", "./cmd/fence-node-agent")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build kubefence binaries: %w\n%s", err, out)
	}
	return nil
}

// runner carries one scenario run.
type runner struct {
	sc      *Scenario
	o       RunOptions
	h       *Harness
	storage *Storage
	rec     *Recorder
	mon     *Monitor
	agents  *NodeAgents // nil without nodeAgents
	report  *Report
	t0      time.Time

	configErr error // the scenario's config overrides did not apply

	podNode   map[string]string // pod → node at the start
	disturbed map[string]bool

	mu       sync.Mutex
	replicas []*scenarioReplica
	paused   *scenarioReplica
	// spare is the switched-off BMC editTarget names; nil until a step needs it.
	spare *bmc.IPMISim
}

// RunScenario runs sc on a fresh simulated cluster and stops every process it started,
// by PID, before it returns. The error is for a run that could not be carried out (a
// cluster that did not start); a scenario that fails is a Report that is not OK.
func RunScenario(ctx context.Context, sc *Scenario, o RunOptions) (rep *Report, err error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	r := &runner{sc: sc, o: o, report: &Report{Scenario: sc.Name}, podNode: map[string]string{}, disturbed: map[string]bool{}}
	began := time.Now()
	defer func() { r.report.Elapsed = time.Since(began) }()
	if o.BinDir == "" {
		o.BinDir = filepath.Join(o.Dir, "bin")
		if err := BuildScenarioBinaries(ctx, o.BinDir); err != nil {
			return nil, err
		}
		r.o.BinDir = o.BinDir
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	pids, err := r.start(runCtx)
	defer func() {
		cancel()
		if r.mon != nil {
			r.mon.Wait()
		}
		if r.agents != nil {
			r.agents.Stop()
		}
		r.report.Leftover = append(r.report.Leftover, r.stop(pids)...)
	}()
	if err != nil {
		return r.report, err
	}
	stepsCtx, stepsCancel := context.WithTimeout(runCtx, sc.Timeout.Duration)
	defer stepsCancel()
	if err := r.steps(stepsCtx); err != nil {
		r.fail("steps: %v", err)
	} else {
		r.expect(stepsCtx)
	}
	r.mon.Settle(runCtx, 10)
	ev, err := GatherEvidence(runCtx, r.h, r.rec, r.disturbed)
	if err != nil {
		return r.report, fmt.Errorf("gather evidence: %w", err)
	}
	if r.agents != nil {
		ev.Resets, ev.Halts = r.agents.Resets(), r.agents.Halts()
	}
	r.report.Violations = r.mon.Check(ev)
	return r.report, nil
}

func (r *runner) logf(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if !r.t0.IsZero() {
		msg = fmt.Sprintf("%+7.2fs %s", time.Since(r.t0).Seconds(), msg)
	}
	r.mu.Lock()
	r.report.Steps = append(r.report.Steps, msg)
	r.mu.Unlock()
	r.o.Logf("scenario %s: %s", r.sc.Name, msg)
}

func (r *runner) fail(format string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report.Failures = append(r.report.Failures, fmt.Sprintf(format, a...))
}

// start brings up storage, the harness, the workload, the watchers and the controllers;
// it returns the PIDs to check after the run.
func (r *runner) start(ctx context.Context) (func() map[string]int, error) {
	pids := func() map[string]int {
		out := map[string]int{}
		if r.h != nil {
			out = r.h.PIDs()
		}
		if r.storage != nil {
			out["tgtd"] = r.storage.Server.PID()
		}
		return out
	}
	if r.sc.Storage == "iscsi" {
		if err := r.startStorage(ctx); err != nil {
			return pids, err
		}
	}
	h, err := StartHarness(ctx, r.harnessOptions())
	if err != nil {
		return pids, err
	}
	r.h = h
	if r.configErr != nil {
		// The harness would otherwise run the default config in place of the scenario's.
		return pids, fmt.Errorf("scenario %s: config: %w", r.sc.Name, r.configErr)
	}
	ss := r.sc.StatefulSet
	if err := h.Cluster.DeploySpreadStatefulSet(ctx, ss.Name, ss.Replicas); err != nil {
		return pids, err
	}
	if ss.Guarded {
		if err := h.Cluster.GuardWithPDB(ctx, ss.Name, ss.Replicas); err != nil {
			return pids, err
		}
	}
	for i := range ss.Replicas {
		pod := fmt.Sprintf("%s-%d", ss.Name, i)
		node, err := nodeOfPod(ctx, h.Cluster, pod)
		if err != nil {
			return pids, err
		}
		r.podNode[pod] = node
	}
	if a := r.sc.NodeAgents; a != nil {
		unarmed := map[string]bool{}
		for _, ref := range a.Unarmed {
			unarmed[r.node(ref)] = true
		}
		r.agents, err = StartNodeAgents(ctx, h, NodeAgentOptions{Bin: filepath.Join(r.o.BinDir, "fence-node-agent"),
			Isolation: a.Isolation.Duration, ReadInterval: a.ReadInterval.Duration, WatchdogTimeout: a.WatchdogTimeout.Duration, Unarmed: unarmed, Peers: a.Peers, Batch: a.Batch})
		if err != nil {
			return pids, err
		}
		if err := r.agents.WaitReports(ctx, 3*time.Minute); err != nil {
			return pids, err
		}
		if a.Heartbeats {
			err := h.RewriteConfig(func(c *v1alpha1.Config) {
				c.Heartbeats = &v1alpha1.Heartbeats{KeyFile: r.agents.key,
					ProbeInterval: metav1.Duration{Duration: a.Isolation.Duration / 20}, KubeletTimeout: metav1.Duration{Duration: 500 * time.Millisecond}}
			})
			if err != nil {
				return pids, err
			}
		}
	}
	if r.rec, err = NewRecorder(ctx, h.Cluster); err != nil {
		return pids, err
	}
	if r.mon, err = StartMonitor(ctx, h, r.storage, 50*time.Millisecond); err != nil {
		return pids, err
	}
	if err := r.startControllers(ctx); err != nil {
		return pids, err
	}
	r.t0 = time.Now()
	r.logf("cluster up: %d nodes, %s on %v", r.sc.Nodes, ss.Name, r.podNode)
	return pids, nil
}

// node resolves "@web-0" to the node its pod ran on at the start.
func (r *runner) node(ref string) string {
	if pod, ok := strings.CutPrefix(ref, "@"); ok {
		return r.podNode[pod]
	}
	return ref
}

func (r *runner) nodes(st Step) []string {
	var out []string
	for _, ref := range append([]string{st.Node}, st.Nodes...) {
		if ref != "" {
			out = append(out, r.node(ref))
		}
	}
	out = append(out, r.sc.Zones[st.Zone]...)
	return out
}

// stop ends the controllers, the cluster, the BMCs and tgtd, and returns whatever of
// them is still alive.
func (r *runner) stop(pids func() map[string]int) []string {
	// The supervisor starts replicas under r.mu; holding it keeps one from starting while
	// the harness stops the others.
	r.mu.Lock()
	defer r.mu.Unlock()
	all := pids()
	var errs []error
	if r.h != nil {
		errs = append(errs, r.h.Stop())
	}
	if r.storage != nil {
		errs = append(errs, r.storage.Server.Stop())
	}
	if r.spare != nil {
		errs = append(errs, r.spare.Stop())
	}
	var left []string
	if err := errors.Join(errs...); err != nil {
		left = append(left, "stop: "+err.Error())
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := syscall.Kill(all[name], 0); err == nil {
			left = append(left, fmt.Sprintf("%s (pid %d) still running", name, all[name]))
		}
	}
	return left
}

// pollUntil polls cond every interval until it holds, fails or timeout passes.
func pollUntil(ctx context.Context, interval, timeout time.Duration, cond func(context.Context) (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, interval, timeout, true, cond)
}
