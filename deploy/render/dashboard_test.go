package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// metricNamesFile lists every metric the binaries register, with its type; a test of
// the main module (pkg/app TestMetricNames) keeps it up to date from their registries.
const metricNamesFile = "testdata/metric-names.txt"

// dashboardSelector is what every query of the dashboard selects on: its template
// variables, so that one Grafana serves several installs and clusters.
var dashboardSelector = []string{`namespace=~"$namespace"`, `cluster=~"$cluster"`}

// TestDashboardQueries renders the chart's Grafana dashboard and reads every query of
// every panel, and of its template variables: each metric it names must be one a binary
// registers (a histogram's _bucket, _sum and _count series included), each selector must
// carry the namespace and cluster variables, and the panels must show what the runbooks
// send people to look at.
func TestDashboardQueries(t *testing.T) {
	registered := readMetricNames(t)
	dash := renderDashboard(t)
	used := map[string]bool{}
	for _, q := range dash.queries() {
		sels, err := promSelectors(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		if len(sels) == 0 {
			t.Errorf("%s: %q selects no metric", q.where, q.expr)
		}
		for _, s := range sels {
			used[s.name] = true
			if !registeredAs(s.name, registered) {
				t.Errorf("%s: metric %s is registered by no binary (%s): %q", q.where, s.name, metricNamesFile, q.expr)
			}
			for _, m := range dashboardSelector {
				if !q.variable && !slices.Contains(s.matchers, m) {
					t.Errorf("%s: %s{%s} lacks %s", q.where, s.name, strings.Join(s.matchers, ", "), m)
				}
			}
		}
	}
	for _, v := range []string{"datasource", "cluster", "namespace"} {
		if !slices.Contains(dash.variables(), v) {
			t.Errorf("dashboard has no template variable %q", v)
		}
	}
	for _, name := range []string{"kubefence_failure_to_released_seconds_bucket", "kubefence_target_up", "kubefence_target_reads_off",
		"kubefence_target_mismatch_total", "kubefence_paused", "kubefence_holds_total", "kubefence_node_agent_members",
		"kubefence_node_agent_peers_answering", "kubefence_node_agent_watchdog_armed", "kubefence_leader",
		"kubefence_node_fenced_timestamp_seconds"} {
		if !used[name] {
			t.Errorf("no panel shows %s", name)
		}
	}
}

// readMetricNames reads metricNamesFile: a name and its type ("-": not known until first
// used) a line.
func readMetricNames(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(metricNamesFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, typ, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("%s: %q is not a name and a type", metricNamesFile, line)
		}
		out[name] = typ
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s lists no metric", metricNamesFile)
	}
	return out
}

// registeredAs reports whether a query may select name: a registered metric, or a
// series of a registered histogram or summary (or of one whose type shows only once it
// has a series).
func registeredAs(name string, registered map[string]string) bool {
	if _, ok := registered[name]; ok {
		return true
	}
	for suffix, types := range map[string][]string{"_bucket": {"histogram", "-"}, "_sum": {"histogram", "summary", "-"},
		"_count": {"histogram", "summary", "-"}} {
		if base, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(types, registered[base]) {
			return true
		}
	}
	return false
}

// dashboard is the parts of a Grafana dashboard the test reads.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	// Panels are a row's.
	Panels []panel `json:"panels"`
}

// query is one PromQL expression and where the dashboard has it. A panel's selects on
// the dashboard's variables (dashboardSelector); a variable's lists their values.
type query struct {
	where, expr string
	variable    bool
}

// queries are every panel's targets, and the metric selector of every query variable
// (label_values(SELECTOR, LABEL)).
func (d dashboard) queries() []query {
	var out []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, query{where: fmt.Sprintf("panel %q query %s", p.Title, tg.RefID), expr: tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		inner, ok := strings.CutPrefix(q, "label_values(")
		if i := strings.LastIndex(inner, ","); ok && i > 0 {
			q = inner[:i]
		}
		out = append(out, query{where: fmt.Sprintf("variable %q", v.Name), expr: q, variable: true})
	}
	return out
}

func (d dashboard) variables() []string {
	var out []string
	for _, v := range d.Templating.List {
		out = append(out, v.Name)
	}
	return out
}

// renderDashboard renders the chart with the dashboard on and parses its JSON.
func renderDashboard(t *testing.T) dashboard {
	t.Helper()
	out, err := Render(chartDir, map[string]any{"grafanaDashboard": map[string]any{"enabled": true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range decode(t, out)["ConfigMap"] {
		raw, ok := cm.Data["kubefence.json"].(string)
		if !ok {
			continue
		}
		var d dashboard
		if err := json.Unmarshal([]byte(raw), &d); err != nil {
			t.Fatalf("dashboard JSON: %v", err)
		}
		if len(d.Panels) == 0 {
			t.Fatal("dashboard has no panel")
		}
		return d
	}
	t.Fatal("no ConfigMap with kubefence.json rendered")
	return dashboard{}
}
