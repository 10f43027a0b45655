package incidents

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// statusSchema is the NodeFence CRD's schema of status, as the API server applies it.
func statusSchema(t testing.TB) map[string]any {
	var crd map[string]any
	if err := yaml.Unmarshal(v1alpha1.NodeFenceCRD, &crd); err != nil {
		t.Fatal(err)
	}
	versions := crd["spec"].(map[string]any)["versions"].([]any)
	schema := versions[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
	return schema["properties"].(map[string]any)["status"].(map[string]any)
}

// withinSchema lists every value of v that breaks a maxLength, maxItems or enum of schema.
func withinSchema(path string, v any, schema map[string]any) []string {
	var out []string
	switch v := v.(type) {
	case string:
		if max, ok := schema["maxLength"].(float64); ok && len(v) > int(max) {
			out = append(out, fmt.Sprintf("%s: %d bytes, max %v", path, len(v), max))
		}
		if !utf8.ValidString(v) {
			out = append(out, path+": not UTF-8")
		}
		if enum, ok := schema["enum"].([]any); ok && v != "" {
			found := false
			for _, e := range enum {
				found = found || e == v
			}
			if !found {
				out = append(out, fmt.Sprintf("%s: %q not in %v", path, v, enum))
			}
		}
	case []any:
		if max, ok := schema["maxItems"].(float64); ok && len(v) > int(max) {
			out = append(out, fmt.Sprintf("%s: %d items, max %v", path, len(v), max))
		}
		items, _ := schema["items"].(map[string]any)
		for i, item := range v {
			out = append(out, withinSchema(fmt.Sprintf("%s[%d]", path, i), item, items)...)
		}
	case map[string]any:
		props, _ := schema["properties"].(map[string]any)
		for k, child := range v {
			sub, _ := props[k].(map[string]any)
			out = append(out, withinSchema(path+"."+k, child, sub)...)
		}
	}
	return out
}

// FuzzStatusWithinCRD: whatever text agents and nodes hand the controller, and however
// long an incident runs, the status it writes stays within the CRD's limits (read from
// the CRD itself): a status the API server refused would stop the incident.
func FuzzStatusWithinCRD(f *testing.F) {
	f.Add("read back on", 3, 1, string(plugin.KindRetryable), "")
	f.Add(strings.Repeat("é", 20000), 1200, 3, strings.Repeat("K", 100), "\xff\xfe")
	f.Add("", 0, 0, "", strings.Repeat("x", 70000))
	schema := statusSchema(f)
	f.Fuzz(func(t *testing.T, text string, steps, attempts int, kind, message string) {
		steps, attempts = min(max(steps, 0), 3000), min(max(attempts, 0), 50)
		st := v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFencing, Message: message}
		t0 := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
		AddStep(&st, t0, v1alpha1.StepDetected, text)
		for i := range steps {
			AddStep(&st, t0.Add(time.Duration(i)*time.Millisecond), []string{v1alpha1.StepUnfenceFailed, v1alpha1.StepAgentError, v1alpha1.StepFenceStarted}[i%3], text)
		}
		for i := range attempts {
			st.Attempts = append(st.Attempts, v1alpha1.Attempt{Level: 1, Agent: "ipmi", Try: int32(i + 1),
				State: v1alpha1.AttemptFailed, Evidence: text, Error: message, ErrorKind: kind, PowerState: kind})
		}
		ClampStatus(&st)
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			t.Fatal(err)
		}
		if bad := withinSchema("status", u, schema); len(bad) > 0 {
			t.Fatalf("the CRD would refuse this status: %v", bad)
		}
		if st.Timeline[0].Type != v1alpha1.StepDetected {
			t.Fatalf("the opening step was dropped")
		}
	})
}
