// Command checkimports fails when a package imports, directly or through others, what
// the design says it must not (make lint). Each rule below names the packages it covers,
// the import paths they must not depend on, the exceptions, and why: the rules are the
// reference for how the packages of README.md's table ("How it fits together") may
// depend on each other, along the flow docs/incident-tour.md walks through.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
)

// rule forbids the packages under Dir (relative to the module) every dependency that
// matches Forbidden, unless it matches Allowed. $MOD in a pattern is the module path.
type rule struct {
	Dir       string
	Forbidden string
	Allowed   string
	Why       string
}

var rules = []rule{
	{Dir: "pkg/apis", Forbidden: `^$MOD/(pkg|cmd|test)/`, Allowed: `^$MOD/pkg/apis(/|$)`, Why: "API types stand alone"},
	{Dir: "pkg/configfile", Forbidden: `^$MOD/`, Allowed: `^$MOD/pkg/apis(/|$)`, Why: "reading the configuration file knows only the API types"},
	{Dir: "pkg/policy", Forbidden: `^(k8s\.io/client-go|$MOD/pkg/(plugin|fencer|podrelease|controller|detector))(/|$)`, Why: "policy is pure decisions"},
	{Dir: "pkg/detector", Forbidden: `^$MOD/pkg/(plugin|fencer|podrelease)(/|$)`, Why: "the detector only observes"},
	{Dir: "pkg/plugin", Forbidden: `^(k8s\.io/|$MOD/pkg/(controller|detector|policy|fencer|podrelease|apis)(/|$))`, Why: "the agent contract knows no Kubernetes"},
	{Dir: "pkg/fenceagent", Forbidden: `^(k8s\.io/|$MOD/pkg/(controller|detector|policy|fencer|podrelease|apis)(/|$))`, Why: "agents know no Kubernetes"},
	{Dir: "pkg/podrelease", Forbidden: `^$MOD/pkg/plugin(/|$)`, Why: "storage and pod cleanup never triggers fencing"},
	{Dir: "pkg/fencer", Forbidden: `^$MOD/pkg/(controller|podrelease)(/|$)`, Why: "the state machine does not reach into its wiring"},
	{Dir: "pkg/serving", Forbidden: `^$MOD/pkg/`, Why: "serving knows nothing of fencing"},
	{Dir: "pkg/kubemetrics", Forbidden: `^$MOD/`, Why: "client-go's metrics know nothing of fencing"},
	{Dir: "pkg/releasegate", Forbidden: `^$MOD/`, Why: "the release gate counts syncs and holds records back; it knows nothing of fencing"},
	{Dir: "pkg/maintenance", Forbidden: `^$MOD/pkg/(controller|policy|detector|incidents|fencecall|devicemonitor|requests|orphans|podrelease|plugin|fencer|app)(/|$)`, Why: "maintenance signals are read from the cluster's objects; holding a node is policy's"},
	{Dir: "pkg/controller", Forbidden: `^$MOD/pkg/app(/|$)`, Why: "the engine does not know how the process is assembled"},
	{Dir: "pkg/leader", Forbidden: `^$MOD/`, Allowed: `^$MOD/pkg/(apis|coalesce|caches/tombstone)(/|$)`, Why: "leadership knows nothing of fencing (a missed delete of an identity Lease is unwrapped by tombstone, which knows no kind)"},
	{Dir: "pkg/coalesce", Forbidden: `^$MOD/`, Why: "shared reads know nothing of what they read"},
	{Dir: "pkg/healthcheck", Forbidden: `^(k8s\.io/client-go|$MOD/pkg/(controller|fencer|podrelease|plugin|detector|policy|app))(/|$)`, Why: "the remediation contract is pure: what a request names and what its status shows"},
	{Dir: "pkg/netfence", Forbidden: `^$MOD/pkg/(controller|fencer|podrelease|detector|policy|app|fenceagent)(/|$)`, Why: "a NetworkFence agent acts on what it is asked, as any agent"},
	{Dir: "pkg/selffence", Forbidden: `^(k8s\.io|$MOD)/`, Why: "the self-fencing rules are pure: what each side knows, and a time"},
	{Dir: "pkg/watchdog", Forbidden: `^(k8s\.io/(client-go|api|apimachinery)|$MOD)/`, Why: "the watchdog only counts down; the agent decides when the node may live"},
	{Dir: "pkg/nodeagent", Forbidden: `^$MOD/pkg/(controller|fencer|podrelease|plugin|fenceagent|detector|policy|app)(/|$)`, Why: "the node agent follows its rule and reports; it decides nothing about other nodes"},
	{Dir: "pkg/generated", Forbidden: `^$MOD/`, Allowed: `^$MOD/pkg/(apis|generated)(/|$)`, Why: "generated clients know only the API types"},
	{Dir: "pkg/incidents", Forbidden: `^$MOD/pkg/(controller|plugin|fencecall|podrelease|detector|policy|app|fenceagent|nodeagent)(/|$)`, Why: "the incident record knows its objects, not who drives them"},
	{Dir: "pkg/fencecall", Forbidden: `^$MOD/pkg/(controller|incidents|podrelease|devicemonitor|app)(/|$)`, Why: "reaching agents is all it knows: no incident, no release, no health verdict"},
	{Dir: "pkg/devicemonitor", Forbidden: `^$MOD/pkg/(controller|incidents|podrelease|app)(/|$)`, Why: "the device monitor reads devices and marks nodes; the incident loop decides"},
	{Dir: "pkg/requests", Forbidden: `^$MOD/pkg/(controller|fencecall|devicemonitor|podrelease|plugin|fencer|detector|app)(/|$)`, Why: "the health checkers' requests ask the incident loop; they fence and release nothing themselves"},
	{Dir: "pkg/orphans", Forbidden: `^$MOD/pkg/(controller|fencecall|devicemonitor|requests|plugin|app)(/|$)`, Why: "the orphan repair removes taints and records it; it calls no agent"},
	{Dir: "pkg/caches", Forbidden: `^$MOD/pkg/(controller|fencecall|devicemonitor|requests|orphans|incidents|podrelease|plugin|fencer|app)(/|$)`, Why: "the shared caches know what they watch, not who reads it"},
	{Dir: "pkg/nodeagentwatch", Forbidden: `^$MOD/pkg/(controller|fencecall|devicemonitor|requests|orphans|incidents|podrelease|app)(/|$)`, Why: "the watch on the node agents observes and says what it saw; it fences, releases and records nothing"},
	{Dir: "pkg/controller", Forbidden: `^$MOD/pkg/(devicemonitor|orphans|nodeagentwatch|app)(/|$)`, Why: "the incident loop asks its peers through their methods and never runs the leader's housekeepers; pkg/app wires them"},
	{Dir: "pkg/nodeview", Forbidden: `^$MOD/pkg/(controller|oncall|fencecall|nodeagentwatch|devicemonitor|requests|orphans|podrelease|plugin|fencer|app)(/|$)`, Why: "a node's view and the decision on it are computed from what the caller read: the incident loop and explain both call it, and it calls neither"},
	{Dir: "pkg/oncall", Forbidden: `^$MOD/pkg/(controller|fencecall|devicemonitor|requests|orphans|podrelease|plugin|fencer|app|fenceagent|nodeagent)(/|$)`, Why: "a person's word is decided here and carried out by the incident loop: no agent call, no release, no write"},
	{Dir: "pkg/testpoint", Forbidden: `^$MOD/pkg/(controller|app|fencecall|plugin|fencer|incidents)(/|$)`, Why: "the tests' pause points stop the process and know nothing else"},
	{Dir: "pkg/loopmetrics", Forbidden: `^$MOD/pkg/(controller|fencecall|devicemonitor|requests|orphans|incidents|podrelease|app|nodeagentwatch|oncall|maintenance)(/|$)`, Why: "the loop's metrics are names and labels; they observe nothing themselves"},
	{Dir: "pkg/caches/tombstone", Forbidden: `^$MOD/`, Why: "unwrapping a missed delete knows no kind, so that every controller's handlers may use it"},
	{Dir: "pkg/internal/fixture", Forbidden: `^$MOD/`, Allowed: `^$MOD/pkg/apis(/|$)`, Why: "the tests' shared fixture knows only the API types, so that the tests of any package may use it"},
	{Dir: "pkg", Forbidden: `^$MOD/pkg/internal/fixture(/|$)`, Why: "the shared fixture is for tests; production code never imports it"},
	{Dir: "pkg", Forbidden: `^$MOD/(cmd|test|hack)(/|$)`, Why: "libraries never import binaries, tests or tools"},
}

// pkgDeps is a package and its transitive dependencies, as go list reports them.
type pkgDeps struct {
	Path string
	Deps []string
}

// violations applies the rules to pkgs of module mod.
func violations(mod string, rs []rule, pkgs []pkgDeps) ([]string, error) {
	var out []string
	for _, r := range rs {
		forbidden, err := regexp.Compile(strings.ReplaceAll(r.Forbidden, "$MOD", regexp.QuoteMeta(mod)))
		if err != nil {
			return nil, fmt.Errorf("rule for %s: forbidden: %w", r.Dir, err)
		}
		var allowed *regexp.Regexp
		if r.Allowed != "" {
			if allowed, err = regexp.Compile(strings.ReplaceAll(r.Allowed, "$MOD", regexp.QuoteMeta(mod))); err != nil {
				return nil, fmt.Errorf("rule for %s: allowed: %w", r.Dir, err)
			}
		}
		dir := mod + "/" + r.Dir
		for _, p := range pkgs {
			if p.Path != dir && !strings.HasPrefix(p.Path, dir+"/") {
				continue
			}
			for _, d := range p.Deps {
				if d == p.Path || strings.HasPrefix(d, p.Path+"/") || !forbidden.MatchString(d) || (allowed != nil && allowed.MatchString(d)) {
					continue
				}
				out = append(out, fmt.Sprintf("%s imports %s: %s", strings.TrimPrefix(p.Path, mod+"/"), d, r.Why))
			}
		}
	}
	return out, nil
}

func main() {
	mod, err := goOutput("list", "-m")
	if err != nil {
		fatal(err)
	}
	mod = strings.TrimSpace(mod)
	list, err := goOutput("list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./...")
	if err != nil {
		fatal(err)
	}
	var pkgs []pkgDeps
	sc := bufio.NewScanner(strings.NewReader(list))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			pkgs = append(pkgs, pkgDeps{Path: f[0], Deps: f[1:]})
		}
	}
	if err := sc.Err(); err != nil {
		fatal(err)
	}
	v, err := violations(mod, rules, pkgs)
	if err != nil {
		fatal(err)
	}
	for _, line := range v {
		fmt.Println("checkimports:", line)
	}
	if len(v) > 0 {
		os.Exit(1)
	}
	fmt.Printf("checkimports: all %d import rules hold over %d packages\n", len(rules), len(pkgs))
}

func goOutput(args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "checkimports:", err)
	os.Exit(2)
}
