package app

import (
	"bytes"
	"flag"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	"github.com/kubefence/kubefence/pkg/kubemetrics"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/plugin/plugintest"
)

// metricNames is the list of every metric the binaries register, which the chart's
// dashboard test (deploy/render) checks each query against. TestMetricNames keeps it.
const metricNames = "../../deploy/render/testdata/metric-names.txt"

var update = flag.Bool("update", false, "rewrite "+metricNames)

// fqName reads a metric's name from its descriptor (prometheus.Desc has no getter).
var fqName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

// TestMetricNames: metric-names.txt lists every metric fence-controller and
// fence-node-agent register, as they register them: the controllers assembled as RunApp
// assembles them (with every optional part on, so that each registers its metrics),
// client-go's, the identity Leases' and the node agent's. Each line is a name and its
// type as a scrape shows it; "-" for a vector with no series until its first use, whose
// type a scrape cannot show yet. The Go runtime's go_* and the process' process_*
// metrics are left out: they change with the Go version and the platform. Rewrite it
// with go test ./pkg/app -run TestMetricNames -update.
func TestMetricNames(t *testing.T) {
	lines := map[string]string{}
	for _, reg := range []*prometheus.Registry{controllerRegistry(t), (&nodeagent.Agent{}).Metrics()} {
		for name, typ := range registered(t, reg) {
			if !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
				lines[name] = name + " " + typ
			}
		}
	}
	var out bytes.Buffer
	out.WriteString("# Every metric fence-controller and fence-node-agent register, and its type (\"-\": no\n" +
		"# series until first used). Written by go test ./pkg/app -run TestMetricNames -update.\n")
	for _, name := range slices.Sorted(maps.Keys(lines)) {
		out.WriteString(lines[name] + "\n")
	}
	if *update {
		if err := os.WriteFile(metricNames, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(metricNames)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, out.Bytes()) {
		t.Errorf("%s is stale: run go test ./pkg/app -run TestMetricNames -update; want:\n%s", metricNames, out.Bytes())
	}
	for _, name := range []string{"kubefence_leader", "kubefence_node_fenced_timestamp_seconds", "kubefence_heartbeat_agents",
		"kubefence_identity_lease_renewals_total", "workqueue_depth", "kubefence_node_agent_watchdog_armed", "kubefence_build_info"} {
		if lines[name] == "" {
			t.Errorf("%s not registered", name)
		}
	}
}

// controllerRegistry is fence-controller's registry as RunApp fills it.
func controllerRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	cfg := &v1alpha1.Config{
		Agents:              []v1alpha1.Agent{{Name: "ipmi", SHA256: strings.Repeat("0", 64), Target: v1alpha1.TargetSource{Annotation: "bmc"}}},
		Policies:            []v1alpha1.Policy{{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{"ipmi"}}}}},
		Heartbeats:          &v1alpha1.Heartbeats{KeyFile: "/dev/null"},
		ExternalRemediation: v1alpha1.ExternalRemediation{Enabled: true},
	}
	cfg.Default()
	reg := newRegistry()
	kubemetrics.Install()
	if _, err := Assemble(Assembly{Config: cfg, Kube: fake.NewClientset(), Fencing: fencingfake.NewSimpleClientset(),
		Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), Agents: plugintest.One{A: &plugintest.Machine{On: true}},
		Recorder: record.NewFakeRecorder(10), Registry: reg, Identity: "metrics"}); err != nil {
		t.Fatal(err)
	}
	if err := kubemetrics.Register(reg); err != nil {
		t.Fatal(err)
	}
	leader.NewIdentityLeaseMetrics(reg) // announce's
	return reg
}

// registered returns the names reg describes, each with its type where a gather shows one.
func registered(t *testing.T, reg *prometheus.Registry) map[string]string {
	t.Helper()
	out := map[string]string{}
	descs := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(descs)
		close(descs)
	}()
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("descriptor without a name: %s", d)
		}
		out[m[1]] = "-"
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		out[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	return out
}
