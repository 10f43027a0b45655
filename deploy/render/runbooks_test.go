package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// runbooks is the file every alert's runbook_url points into, a section per alert.
const runbooks = "../../docs/runbooks.md"

// alertRules renders the chart with values and returns its alerts' rules by name.
func alertRules(t *testing.T, dir string, values map[string]any) map[string]map[string]any {
	t.Helper()
	out, err := Render(dir, values)
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]map[string]any{}
	for _, pr := range decode(t, out)["PrometheusRule"] {
		groups, _ := pr.Spec["groups"].([]any)
		for _, g := range groups {
			rs, _ := g.(map[string]any)["rules"].([]any)
			for _, r := range rs {
				rule := r.(map[string]any)
				if name, ok := rule["alert"].(string); ok {
					rules[name] = rule
				}
			}
		}
	}
	return rules
}

// TestAlertRunbooks: every alert the chart renders (every optional part on) links to its
// own section of docs/runbooks.md in the release the chart is (the tag v<appVersion>),
// not on main, where a section moved since would break the link; that section exists,
// and every alert's section has its alert. A chart of another version links to that
// version's runbooks.
func TestAlertRunbooks(t *testing.T) {
	doc, err := os.ReadFile(runbooks)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			sections[strings.ToLower(strings.ReplaceAll(h, " ", "-"))] = true
		}
	}
	// The chart as it is, and as the release tool stamps another version on it.
	other := t.TempDir()
	if err := copyTree(chartDir, other); err != nil {
		t.Fatal(err)
	}
	if err := editFile(filepath.Join(other, "Chart.yaml"), func(b []byte) ([]byte, error) { return setChartVersion(b, "0.7.3") }); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{chartDir, other} {
		ch, err := loader.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		base := fmt.Sprintf("https://github.com/kubefence/kubefence/blob/v%s/docs/runbooks.md#", ch.Metadata.AppVersion)
		rules := alertRules(t, dir, readValues(t, "testdata/kubeconform-all-on.yaml"))
		alerts := map[string]bool{}
		for name := range rules {
			alerts[strings.ToLower(name)] = true
		}
		for s := range sections {
			if strings.HasPrefix(s, "kubefence") && !alerts[s] {
				t.Errorf("chart %s renders no alert for the runbook section %q", ch.Metadata.AppVersion, s)
			}
		}
		for name, rule := range rules {
			annotations, _ := rule["annotations"].(map[string]any)
			url, _ := annotations["runbook_url"].(string)
			if want := base + strings.ToLower(name); url != want {
				t.Errorf("chart %s: %s runbook_url %q, want %q", ch.Metadata.AppVersion, name, url, want)
			}
			if !sections[strings.ToLower(name)] {
				t.Errorf("%s has no section %q", runbooks, "## "+name)
			}
		}
	}
}

// TestLeftOffFor: KubefenceNodeLeftOff compares the time since a node's fence was verified
// with metrics.prometheusRule.leftOffFor in seconds, whatever units it is written in; the
// schema refuses a duration the conversion does not read.
func TestLeftOffFor(t *testing.T) {
	for leftOffFor, seconds := range map[string]int{"30m": 1800, "1h30m": 5400, "90m": 5400, "45s": 45, "2d": 172800, "1d2h3m4s": 93784} {
		t.Run(leftOffFor, func(t *testing.T) {
			rules := alertRules(t, chartDir, map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true, "leftOffFor": leftOffFor}}})
			expr, _ := rules["KubefenceNodeLeftOff"]["expr"].(string)
			if want := fmt.Sprintf(" > %d", seconds); !strings.HasSuffix(strings.TrimSpace(expr), want) {
				t.Errorf("expr %q, want it to end in %q", expr, want)
			}
		})
	}
	for _, bad := range []string{"30", "1.5h", "30min", "1w", ""} {
		t.Run("refuses "+bad, func(t *testing.T) {
			_, err := Render(chartDir, map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true, "leftOffFor": bad}}})
			if err == nil || !strings.Contains(err.Error(), "leftOffFor") {
				t.Errorf("leftOffFor %q: %v, want the schema's refusal", bad, err)
			}
		})
	}
}
