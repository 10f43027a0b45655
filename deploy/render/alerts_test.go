package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// alertTests are promtool unit tests of the chart's alerts (deploy/render/testdata): each
// alert fires on its first failure and stays quiet while all is well.
const alertTests = "testdata/alerts_test.yaml"

// TestAlertsFire renders the chart's PrometheusRule (window 15m) with node agents, writes its rule groups
// as a Prometheus rules file and runs `promtool test rules` on alertTests.
func TestAlertsFire(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found: run hack/deps.sh (apt-get install prometheus): %v", err)
	}
	// The node agents' alerts render only with node agents that feed a watchdog device and
	// answer their peers.
	out, err := Render(chartDir, map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}},
		"nodeAgent": map[string]any{"enabled": true, "watchdog": map[string]any{"path": "/dev/watchdog"},
			"peers": map[string]any{"enabled": true, "keySecret": "kubefence-peer-key"}}})
	if err != nil {
		t.Fatal(err)
	}
	rules := decode(t, out)["PrometheusRule"]
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules rendered, want 1", len(rules))
	}
	// The tests judge the expressions and labels; annotations are prose for people.
	groups, _ := rules[0].Spec["groups"].([]any)
	for _, g := range groups {
		rs, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rs {
			delete(r.(map[string]any), "annotations")
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kubefence-rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(alertTests)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yaml")
	cmd.Dir = dir
	res, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, res)
	}
	if !strings.Contains(string(res), "SUCCESS") {
		t.Errorf("promtool said:\n%s", res)
	}
}
