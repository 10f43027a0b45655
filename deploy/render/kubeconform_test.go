package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/yannh/kubeconform/pkg/resource"
	"github.com/yannh/kubeconform/pkg/validator"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"

	"github.com/kubefence/kubefence/deploy/render/kubeschemas"
)

// The rendered chart is checked with kubeconform, strictly, against the schemas of the
// lowest Kubernetes version the chart claims (package kubeschemas: the apiserver's own
// OpenAPI document of that version, and the Prometheus Operator's CRDs for its
// ServiceMonitor and PrometheusRule). A kind without a schema fails; nothing is skipped.

var (
	schemasOnce sync.Once
	schemaLocs  kubeschemas.Locations
	schemasErr  error
)

// cacheDir is the repository's .cache, or $KUBEFENCE_CACHE as for hack/controlplane.sh.
func cacheDir(t *testing.T) string {
	if d := os.Getenv("KUBEFENCE_CACHE"); d != "" {
		return d
	}
	d, err := filepath.Abs("../../.cache")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// newValidator is kubeconform in strict mode over the schemas, made first if missing.
func newValidator(t *testing.T) validator.Validator {
	t.Helper()
	schemasOnce.Do(func() {
		schemaLocs, schemasErr = kubeschemas.Ensure(cacheDir(t), t.Logf)
	})
	if schemasErr != nil {
		t.Fatalf("kubeconform schemas are missing and could not be made: %v\n"+
			"Make them with `go run ./cmd/kubeschemas` in deploy/render, "+
			"which needs the Go module proxy or %s@%s and %s in the module cache.",
			schemasErr, "k8s.io/kubernetes", kubeschemas.KubernetesVersion,
			"github.com/prometheus-operator/prometheus-operator@"+kubeschemas.PrometheusOperatorVersion)
	}
	v, err := validator.New(schemaLocs.Templates(), validator.Opts{
		Strict:            true,
		KubernetesVersion: strings.TrimPrefix(kubeschemas.KubernetesVersion, "v"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// lowestClaimed is the lowest Kubernetes version the chart's kubeVersion admits, as
// "v1.31.0", after checking that the schemas are of that minor version.
func lowestClaimed(t *testing.T) string {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^>=\s*v?(\d+)\.(\d+)\.(\d+)(-0)?$`).FindStringSubmatch(strings.TrimSpace(ch.Metadata.KubeVersion))
	if m == nil {
		t.Fatalf("Chart.yaml kubeVersion %q: want the form >=X.Y.Z-0", ch.Metadata.KubeVersion)
	}
	minor := "v" + m[1] + "." + m[2] + "."
	if !strings.HasPrefix(kubeschemas.KubernetesVersion, minor) {
		t.Fatalf("the chart claims Kubernetes %s, the schemas are of %s: set kubeschemas.KubernetesVersion "+
			"to the newest %sN that the module proxy serves (go list -m -versions k8s.io/kubernetes)",
			ch.Metadata.KubeVersion, kubeschemas.KubernetesVersion, minor)
	}
	return "v" + m[1] + "." + m[2] + "." + m[3]
}

// describeResult is a result's object and what kubeconform said of it.
func describeResult(r validator.Result) string {
	sig, _ := r.Resource.Signature()
	var b strings.Builder
	if sig != nil {
		fmt.Fprintf(&b, "%s %s %s/%s:", sig.Version, sig.Kind, sig.Namespace, sig.Name)
	}
	if r.Err != nil {
		fmt.Fprintf(&b, " %v", r.Err)
	}
	for _, e := range r.ValidationErrors {
		fmt.Fprintf(&b, "\n\t%s: %s", e.Path, e.Msg)
	}
	return b.String()
}

func readValues(t *testing.T, path string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestKubeconform renders the chart for the lowest Kubernetes version it claims, with its
// defaults and with values that turn on every optional part, and checks every object.
// nodeAgentKube is the lowest Kubernetes the chart installs the node agent on.
const nodeAgentKube = "v1.32.0"

// lowestFor is the lowest Kubernetes that values install on: lowest, or the node agent's
// when they enable it (TestKubeVersion).
func lowestFor(lowest string, values map[string]any) string {
	if na, _ := values["nodeAgent"].(map[string]any); na["enabled"] == true {
		return nodeAgentKube
	}
	return lowest
}

func TestKubeconform(t *testing.T) {
	kube := lowestClaimed(t)
	v := newValidator(t)
	validated := map[string]int{}
	for _, tc := range []struct {
		name   string
		values map[string]any
	}{
		{"defaults", nil},
		{"testdata/kubeconform-all-on.yaml", readValues(t, "testdata/kubeconform-all-on.yaml")},
		{"testdata/kubeconform-pdb.yaml", readValues(t, "testdata/kubeconform-pdb.yaml")},
		{"allOn", allOn()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := RenderFor(chartDir, tc.values, lowestFor(kube, tc.values))
			if err != nil {
				t.Fatal(err)
			}
			objects := 0
			for _, objs := range decode(t, out) {
				objects += len(objs)
			}
			valid := 0
			for _, r := range v.Validate(tc.name, io.NopCloser(bytes.NewReader(out))) {
				switch r.Status {
				case validator.Valid:
					valid++
					sig, _ := r.Resource.Signature()
					validated[sig.Version+" "+sig.Kind]++
				case validator.Empty:
				default:
					t.Errorf("%s", describeResult(r))
				}
			}
			if valid != objects {
				t.Errorf("%d of %d rendered objects valid against Kubernetes %s", valid, objects, kubeschemas.KubernetesVersion)
			}
		})
	}
	// The values above must keep reaching every kind the chart can render.
	for _, want := range []string{
		"apiextensions.k8s.io/v1 CustomResourceDefinition",
		"apps/v1 Deployment", "v1 Service", "v1 ServiceAccount", "v1 ConfigMap",
		"rbac.authorization.k8s.io/v1 ClusterRole", "rbac.authorization.k8s.io/v1 ClusterRoleBinding",
		"rbac.authorization.k8s.io/v1 Role", "rbac.authorization.k8s.io/v1 RoleBinding",
		"policy/v1 PodDisruptionBudget",
		"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy",
		"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding",
		"monitoring.coreos.com/v1 ServiceMonitor", "monitoring.coreos.com/v1 PrometheusRule",
	} {
		if validated[want] == 0 {
			t.Errorf("no %s rendered and validated", want)
		}
	}
	kinds := make([]string, 0, len(validated))
	for k, n := range validated {
		kinds = append(kinds, fmt.Sprintf("%s (%d)", k, n))
	}
	sort.Strings(kinds)
	t.Logf("valid against Kubernetes %s and Prometheus Operator %s, strict: %s",
		kubeschemas.KubernetesVersion, kubeschemas.PrometheusOperatorVersion, strings.Join(kinds, ", "))
}

// renderedObject is the first object of kind whose name ends in suffix in the chart
// rendered with values.
func renderedObject(t *testing.T, values map[string]any, kind, suffix string) map[string]any {
	t.Helper()
	out, err := RenderFor(chartDir, values, lowestFor(lowestClaimed(t), values))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		if o["kind"] != kind {
			continue
		}
		if meta, _ := o["metadata"].(map[string]any); strings.HasSuffix(fmt.Sprint(meta["name"]), suffix) {
			return o
		}
	}
	t.Fatalf("no %s *%s rendered", kind, suffix)
	return nil
}

// fieldAt is the map at path in o, a path step being a key or, in a list, an index.
func fieldAt(t *testing.T, o any, path ...any) map[string]any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			o = o.(map[string]any)[k]
		case int:
			o = o.([]any)[k]
		}
	}
	m, ok := o.(map[string]any)
	if !ok {
		t.Fatalf("%v: not an object", path)
	}
	return m
}

// validateOne is kubeconform's result for o.
func validateOne(t *testing.T, v validator.Validator, o map[string]any) validator.Result {
	t.Helper()
	b, err := yaml.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return v.ValidateResource(resource.Resource{Path: "test", Bytes: b})
}

// TestKubeconformRejects shows that the check can fail: rendered objects that are valid
// as they are, each changed in one place, are refused with the place named.
func TestKubeconformRejects(t *testing.T) {
	v := newValidator(t)
	monitoring := map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}}
	for name, tc := range map[string]struct {
		values       map[string]any
		kind, suffix string
		change       func(o map[string]any)
		want         []string
	}{
		// Pod-level resources came with Kubernetes 1.32 (feature gate PodLevelResources):
		// a 1.31 apiserver drops them, or refuses them under strict field validation.
		"a pod field of Kubernetes 1.32": {nil, "Deployment", "-controller", func(o map[string]any) {
			fieldAt(t, o, "spec", "template", "spec")["resources"] = map[string]any{"limits": map[string]any{"cpu": "1"}}
		}, []string{"/spec/template/spec", "'resources' not allowed"}},
		// A container's restartPolicyRules came with 1.34 (ContainerRestartRules).
		"a container field of Kubernetes 1.34": {nil, "Deployment", "-controller", func(o map[string]any) {
			fieldAt(t, o, "spec", "template", "spec", "containers", 0)["restartPolicyRules"] = []any{}
		}, []string{"/spec/template/spec/containers/0", "'restartPolicyRules' not allowed"}},
		"a misspelled pod field": {nil, "Deployment", "-controller", func(o map[string]any) {
			fieldAt(t, o, "spec", "template", "spec")["serviceAcountName"] = "kubefence"
		}, []string{"/spec/template/spec", "'serviceAcountName' not allowed"}},
		"replicas as a word": {nil, "Deployment", "-controller", func(o map[string]any) {
			fieldAt(t, o, "spec")["replicas"] = "two"
		}, []string{"/spec/replicas", "want integer"}},
		"a misspelled CRD version field": {nil, "CustomResourceDefinition", "nodefences.fencing.kubefence.io", func(o map[string]any) {
			fieldAt(t, o, "spec", "versions", 0)["selectableField"] = []any{}
		}, []string{"/spec/versions/0", "'selectableField' not allowed"}},
		"a misspelled ServiceMonitor endpoint field": {monitoring, "ServiceMonitor", "-controller", func(o map[string]any) {
			fieldAt(t, o, "spec", "endpoints", 0)["bearerTokenFiel"] = "/token"
		}, []string{"/spec/endpoints/0", "'bearerTokenFiel' not allowed"}},
		"a misspelled metadata field": {nil, "Service", "-metrics", func(o map[string]any) {
			fieldAt(t, o, "metadata")["label"] = map[string]any{"a": "b"}
		}, []string{"/metadata", "'label' not allowed"}},
	} {
		t.Run(name, func(t *testing.T) {
			o := renderedObject(t, tc.values, tc.kind, tc.suffix)
			if r := validateOne(t, v, o); r.Status != validator.Valid {
				t.Fatalf("unchanged, not valid: %s", describeResult(r))
			}
			tc.change(o)
			r := validateOne(t, v, o)
			msg := describeResult(r)
			if r.Status != validator.Invalid {
				t.Fatalf("changed, status %d, want invalid: %s", r.Status, msg)
			}
			for _, want := range tc.want {
				if !strings.Contains(msg, want) {
					t.Errorf("the refusal lacks %q:\n%s", want, msg)
				}
			}
			t.Logf("refused: %s", msg)
		})
	}
	// A kind without a schema is an error, not a skip.
	r := validateOne(t, v, map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"}})
	if r.Status != validator.Error || r.Err == nil || !strings.Contains(r.Err.Error(), "could not find schema for Widget") {
		t.Errorf("a kind without a schema: status %d, %s; want the error that its schema is missing", r.Status, describeResult(r))
	}
}
