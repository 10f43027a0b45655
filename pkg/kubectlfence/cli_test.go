package kubectlfence

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

func TestStatus(t *testing.T) {
	c, _, _ := fixture(t, "alice", append(release(), incidents()...)...)
	var calls []execCall
	rc, out, errOut := run(t, c, "", 0, &calls, "status", "-n", ns)
	if rc != 0 {
		t.Fatalf("exit %d: %s", rc, errOut)
	}
	mustContain(t, out, "prod-kubefence in ops", "pod "+podName+" on node node-9", "epoch 3", "renewed 2s ago",
		"PAUSED:", "yes, 1 request", "storm", "bob: partition",
		"node-1-c", "Held", "UnhealthyBudgetExceeded", "msg node-1-c", "node-2-a", "Fenced")
	for _, ended := range []string{"node-1-a", "node-1-b"} {
		if strings.Contains(out, ended) {
			t.Errorf("status lists ended incident %s:\n%s", ended, out)
		}
	}
	rc, out, _ = run(t, c, "", 0, &calls, "status", "-n", ns, "-o", "json")
	var s Status
	if err := json.Unmarshal([]byte(out), &s); rc != 0 || err != nil {
		t.Fatalf("status -o json: exit %d, %v:\n%s", rc, err, out)
	}
	if s.Leader == nil || s.Leader.Pod != podName || len(s.Pause) != 1 || len(s.Incidents) != 2 ||
		s.Incidents[0].Name != "node-2-a" || s.Incidents[1].Holds[0].Reason != "UnhealthyBudgetExceeded" {
		t.Fatalf("status -o json: %+v", s)
	}
	rc, out, _ = run(t, c, "", 0, &calls, "status", "-n", ns, "-o", "yaml")
	if err := yaml.Unmarshal([]byte(out), &s); rc != 0 || err != nil || s.Release.PauseConfigMap != "prod-kubefence-pause" {
		t.Fatalf("status -o yaml: exit %d, %v:\n%s", rc, err, out)
	}
	if rc, _, errOut := run(t, c, "", 0, &calls, "status", "-n", ns, "-o", "wide"); rc != 1 || !strings.Contains(errOut, "want table, json or yaml") {
		t.Errorf("status -o wide: exit %d, %q", rc, errOut)
	}
}

func TestHistoryNewestFirst(t *testing.T) {
	c, _, _ := fixture(t, "alice", incidents()...)
	var calls []execCall
	rc, out, errOut := run(t, c, "", 0, &calls, "history", "node-1")
	if rc != 0 {
		t.Fatalf("exit %d: %s", rc, errOut)
	}
	c1, b, a := strings.Index(out, "node-1-c"), strings.Index(out, "node-1-b"), strings.Index(out, "node-1-a")
	if c1 < 0 || !(c1 < b && b < a) || strings.Contains(out, "node-2-a") {
		t.Fatalf("history node-1 not newest first, or not node-1's alone:\n%s", out)
	}
	rc, out, _ = run(t, c, "", 0, &calls, "history", "-o", "json", "node-1")
	var in []Incident
	if err := json.Unmarshal([]byte(out), &in); rc != 0 || err != nil || len(in) != 3 || in[0].Phase != "Held" {
		t.Fatalf("history -o json: %v %+v", err, in)
	}
	if rc, out, _ := run(t, c, "", 0, &calls, "history", "node-8"); rc != 0 || !strings.Contains(out, "No incidents.") {
		t.Errorf("history of a node with none: %d %q", rc, out)
	}
}

func TestTimeline(t *testing.T) {
	c, _, _ := fixture(t, "alice", incidents()...)
	var calls []execCall
	rc, out, errOut := run(t, c, "", 0, &calls, "timeline", "node-1-c")
	if rc != 0 {
		t.Fatalf("exit %d: %s", rc, errOut)
	}
	mustContain(t, out, "TIME", "2026-11-29T11:59:00Z  Detected  lease stale", "Held      budget")
	rc, out, _ = run(t, c, "", 0, &calls, "timeline", "node-1-c", "-o", "yaml")
	var steps []v1alpha1.Step
	if err := yaml.Unmarshal([]byte(out), &steps); rc != 0 || err != nil || len(steps) != 2 || steps[1].Type != "Held" {
		t.Fatalf("timeline -o yaml: %v %+v", err, steps)
	}
}

func TestUsage(t *testing.T) {
	c, _, _ := fixture(t, "alice")
	var calls []execCall
	rc, out, _ := run(t, c, "", 0, &calls, "--help")
	if rc != 0 {
		t.Fatalf("--help: exit %d", rc)
	}
	for name := range commands {
		if !strings.Contains(out, "\n  "+name+" ") {
			t.Errorf("--help lists no %s:\n%s", name, out)
		}
	}
	for name, args := range map[string][]string{
		"unknown command":  {"fency"},
		"missing argument": {"history"},
		"one too many":     {"timeline", "a", "b"},
		"unknown flag":     {"status", "--bogus"},
	} {
		if rc, _, _ := run(t, c, "", 0, &calls, args...); rc != 2 {
			t.Errorf("%s: exit %d, want 2", name, rc)
		}
	}
}
