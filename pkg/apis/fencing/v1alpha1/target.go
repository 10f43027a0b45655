package v1alpha1

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"
	"unicode"

	corev1 "k8s.io/api/core/v1"
)

// targetFuncs are the functions a target template may use besides text/template's own.
var targetFuncs = template.FuncMap{
	"replace":    func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
	"trimPrefix": func(prefix, s string) string { return strings.TrimPrefix(s, prefix) },
	"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
	"lower":      strings.ToLower,
}

// TargetTemplate parses the source's Template; a missing map key fails its execution.
func (t TargetSource) TargetTemplate() (*template.Template, error) {
	return template.New("target").Funcs(targetFuncs).Option("missingkey=error").Parse(t.Template)
}

// targetData is what a target template sees of a node.
type targetData struct {
	Name, ProviderID    string
	Labels, Annotations map[string]string
}

// ExecuteTarget runs a parsed target template on node and checks its result.
func ExecuteTarget(tmpl *template.Template, node *corev1.Node) (string, error) {
	return executeOnNode("target template", tmpl, node)
}

// executeOnNode runs a parsed template on node and checks that its result is one word;
// what names the template in errors, which name the node.
func executeOnNode(what string, tmpl *template.Template, node *corev1.Node) (string, error) {
	var b bytes.Buffer
	data := targetData{Name: node.Name, ProviderID: node.Spec.ProviderID, Labels: node.Labels, Annotations: node.Annotations}
	if data.Labels == nil {
		data.Labels = map[string]string{}
	}
	if data.Annotations == nil {
		data.Annotations = map[string]string{}
	}
	if err := tmpl.Execute(&b, data); err != nil {
		return "", fmt.Errorf("%s on node %s: %w", what, node.Name, err)
	}
	out := b.String()
	switch {
	case out == "":
		return "", fmt.Errorf("%s on node %s: empty result", what, node.Name)
	case strings.IndexFunc(out, unicode.IsSpace) >= 0:
		return "", fmt.Errorf("%s on node %s: result %q holds white space", what, node.Name, out)
	}
	return out, nil
}
