package sim

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fastScenarios run in every `go test` (make test); KUBEFENCE_SCENARIOS=all runs every
// file of scenarios/, or a comma-separated list of names runs those.
var fastScenarios = []string{"partition", "storm", "bmc-unreachable-iscsi", "iscsi-recovers", "leader-killed", "watchdog-crash", "watchdog-partition", "watchdog-unarmed", "watchdog-quiet", "watchdog-sigterm-partition", "watchdog-closed-incident", "heartbeat-crash", "heartbeat-quiet", "heartbeat-kubelet-answers"}

var (
	scenarioBinOnce sync.Once
	scenarioBinDir  string
	scenarioBinErr  error
)

// scenarioBinaries builds the controller and agents once per test binary.
func scenarioBinaries(t *testing.T) string {
	t.Helper()
	scenarioBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kubefence-scenario-bin-")
		if err != nil {
			scenarioBinErr = err
			return
		}
		scenarioBinDir = dir
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		scenarioBinErr = BuildScenarioBinaries(ctx, dir)
	})
	if scenarioBinErr != nil {
		t.Fatalf("build binaries: %v", scenarioBinErr)
	}
	return scenarioBinDir
}

func selectedScenarios() func(string) bool {
	sel := os.Getenv("KUBEFENCE_SCENARIOS")
	switch sel {
	case "all":
		return func(string) bool { return true }
	case "":
		return func(name string) bool { return slices.Contains(fastScenarios, name) }
	}
	names := strings.Split(sel, ",")
	return func(name string) bool { return slices.Contains(names, name) }
}

func TestScenarioFilesParse(t *testing.T) {
	t.Parallel()
	scs, err := LoadScenarios("scenarios")
	if err != nil {
		t.Fatal(err)
	}
	if len(scs) < 11 {
		t.Errorf("%d scenario files, want at least 11", len(scs))
	}
	for _, f := range fastScenarios {
		if !slices.ContainsFunc(scs, func(s *Scenario) bool { return s.Name == f }) {
			t.Errorf("fast scenario %s has no file", f)
		}
	}
}

func TestScenarioValidation(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		yaml string
		want []string
	}{
		"unknown field": {"nodes: 3\nstatefulSet: {replicas: 1}\ncolour: red\n", []string{"colour"}},
		"bad refs": {`nodes: 3
statefulSet: {replicas: 1}
steps:
  - {action: partition, node: node-9}
  - {action: partition, node: "@web-3"}
  - {action: explode}
expect:
  incidents: [{node: node-1, phase: Exploded}]
`, []string{"node-9", "@web-3", "explode", "Exploded"}},
		"too many replicas": {"nodes: 2\nstatefulSet: {replicas: 2}\n", []string{"statefulSet.replicas"}},
		"node action without a node": {"nodes: 3\nstatefulSet: {replicas: 1}\nsteps:\n  - {action: powerLoss}\n",
			[]string{"steps[0]: powerLoss needs node"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseScenario([]byte(tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

func runScenario(t *testing.T, sc *Scenario) *Report {
	t.Helper()
	bin := scenarioBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), sc.Timeout.Duration+3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if keep := os.Getenv("KUBEFENCE_KEEP_DIR"); keep != "" {
		// Logs and files of the run stay there, for a person to read.
		dir = filepath.Join(keep, sc.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := RunScenario(ctx, sc, RunOptions{Dir: dir, BinDir: bin, Logf: t.Logf})
	if rep != nil {
		t.Log(rep.String())
		for _, l := range rep.Leftover {
			t.Errorf("leak: %s", l)
		}
	}
	if err != nil {
		t.Fatalf("run scenario %s: %v", sc.Name, err)
	}
	return rep
}

// TestScenarios runs the scenario files: each on a fresh cluster with real processes,
// with the invariant checker on, stopping everything by PID at the end.
func TestScenarios(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts real control planes")
	}
	scs, err := LoadScenarios("scenarios")
	if err != nil {
		t.Fatal(err)
	}
	want := selectedScenarios()
	for _, sc := range scs {
		t.Run(sc.Name, func(t *testing.T) {
			if !want(sc.Name) {
				t.Skip("not in the fast subset; KUBEFENCE_SCENARIOS=all runs it")
			}
			rep := runScenario(t, sc)
			for _, f := range rep.Failures {
				t.Errorf("expectation: %s", f)
			}
			for _, v := range rep.Violations {
				t.Errorf("invariant: %s", v)
			}
		})
	}
}

// plantedBugs are scenarios with a bug a broken kubefence could have, done from the
// test's side; the invariant checker must flag each.
var plantedBugs = map[string]struct {
	yaml string
	want []string
}{
	// A controller that releases before verifying: the victim's pod and volume attachment
	// go while its machine still runs, and the replacement starts elsewhere.
	"release before fence": {`name: planted-release-early
nodes: 3
statefulSet: {replicas: 1}
steps:
  - {at: 0s, action: partition, node: "@web-0"}
  - {after: 1s, action: releaseEarly, node: "@web-0"}
expect:
  moved: [web-0]
`, []string{"released while the node could still run", "split brain"}},
	// An agent (or BMC) that lies: it reports off, the BMC even logs off, but the machine
	// keeps running. Only the ground truth of what runs where can catch it.
	"lying BMC": {`name: planted-lying-bmc
nodes: 3
statefulSet: {replicas: 1}
steps:
  - {at: 0s, action: ignoreBMC, node: "@web-0"}
  - {at: 0s, action: partition, node: "@web-0"}
expect:
  incidents: [{node: "@web-0", phase: Remediated}]
  moved: [web-0]
`, []string{"split brain"}},
}

// TestCheckerCatchesPlantedBugs shows the invariant checker fails a run with a bug.
func TestCheckerCatchesPlantedBugs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts real control planes")
	}
	for name, tc := range plantedBugs {
		t.Run(name, func(t *testing.T) {
			sc, err := ParseScenario([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			rep := runScenario(t, sc)
			if len(rep.Failures) > 0 {
				t.Errorf("the planted bug did not play out: %v", rep.Failures)
			}
			if rep.OK() {
				t.Fatal("the invariant checker passed a run with a planted bug")
			}
			all := strings.Join(rep.Violations, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("no violation mentioning %q in:\n%s", w, all)
				}
			}
		})
	}
}

func TestParseACLs(t *testing.T) {
	t.Parallel()
	out := `Target 1: iqn.2024-01.io.kubefence.sim:disk-node-1
    System information:
        Driver: iscsi
        State: ready
    I_T nexus information:
    LUN information:
        LUN: 0
            Type: controller
    Account information:
    ACL information:
        iqn.2024-01.io.kubefence.sim:node-1
Target 2: iqn.2024-01.io.kubefence.sim:disk-node-2
    System information:
        Driver: iscsi
    ACL information:
`
	got := parseACLs(out)
	if !slices.Equal(got[1], []string{"iqn.2024-01.io.kubefence.sim:node-1"}) || len(got[2]) != 0 {
		t.Errorf("parseACLs = %v", got)
	}
}

// TestChaosReplays: a seed always stands for the same scenario, and what it generates is
// a valid scenario file.
func TestChaosReplays(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 200; seed++ {
		a, err := GenerateChaos(seed).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := GenerateChaos(seed).Marshal()
		if string(a) != string(b) {
			t.Fatalf("seed %d generated two different scenarios:\n%s\n%s", seed, a, b)
		}
		if _, err := ParseScenario(a); err != nil {
			t.Fatalf("seed %d generated an invalid scenario: %v\n%s", seed, err, a)
		}
	}
	y, _ := GenerateChaos(1).Marshal()
	if strings.Contains(string(y), ": 0s") {
		t.Errorf("zero durations written out:\n%s", y)
	}
}

// TestMain removes the binaries the scenarios built once the package's tests are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if scenarioBinDir != "" {
		_ = os.RemoveAll(scenarioBinDir)
	}
	os.Exit(code)
}
