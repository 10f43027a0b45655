package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestPerNodeSecrets: an agent's Secret given by name renders a secretRef by name, and
// the controller may get that Secret only; one chosen per node (a template, a node
// annotation) renders a secretRef that says how, and the controller may get any Secret
// of the release namespace, the names being unknown in advance, and nothing more: no
// list or watch there, no Secret of another namespace. The controller itself reads only
// the labelled ones (pkg/fencecall).
func TestPerNodeSecrets(t *testing.T) {
	for name, tc := range map[string]struct {
		secret             string
		template, annotate string
		perNode            bool
	}{
		"by name":       {secret: "bmc-credentials"},
		"by template":   {secret: `{template: "bmc-{{ .Name }}"}`, template: "bmc-{{ .Name }}", perNode: true},
		"by annotation": {secret: "{annotation: example.com/bmc-secret}", annotate: "example.com/bmc-secret", perNode: true},
	} {
		t.Run(name, func(t *testing.T) {
			values := valuesFile(t, fmt.Sprintf("agents: [{name: ipmi, binary: fence-agent-ipmi, secret: %s, target: {annotation: a}}]", tc.secret))
			out, err := RenderAs(chartDir, values, "fencing", "ops")
			if err != nil {
				t.Fatal(err)
			}
			m := parseManifest(t, out)
			ref := controllerConfig(t, m).Agents[0].SecretRef
			if ref == nil || ref.Namespace != "ops" || ref.Template != tc.template || ref.Annotation != tc.annotate ||
				(ref.Name == "bmc-credentials") == tc.perNode {
				t.Fatalf("secretRef %+v, want in ops, template %q, annotation %q", ref, tc.template, tc.annotate)
			}
			sa := controllerServiceAccount(t, m)
			for _, a := range []struct {
				access
				want bool
			}{
				{access{verb: "get", resource: "secrets", namespace: "ops", name: "bmc-credentials"}, true},
				{access{verb: "get", resource: "secrets", namespace: "ops", name: "bmc-node-1"}, tc.perNode},
				{access{verb: "list", resource: "secrets", namespace: "ops"}, false},
				{access{verb: "watch", resource: "secrets", namespace: "ops"}, false},
				{access{verb: "get", resource: "secrets", namespace: "default", name: "bmc-node-1"}, false},
			} {
				if got := m.allowed(t, "ops", sa, a.access); got != a.want {
					t.Errorf("%s may %s secret %s/%q: %t, want %t", sa, a.verb, a.namespace, a.name, got, a.want)
				}
			}
		})
	}
}

// controllerServiceAccount is the ServiceAccount the controller's Deployment runs as.
func controllerServiceAccount(t *testing.T, m manifest) string {
	t.Helper()
	for _, d := range m.ofKind("Deployment") {
		if strings.HasSuffix(str(d, "metadata", "name"), "-controller") {
			return str(d, "spec", "template", "spec", "serviceAccountName")
		}
	}
	t.Fatal("no controller Deployment rendered")
	return ""
}
