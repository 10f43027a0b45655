package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// manifest is a rendering's objects, decoded, to look up by kind, namespace and name and
// to ask what the rendered RBAC allows: the questions the API server's RBAC authorizer
// would answer once the chart is installed.
type manifest []map[string]any

// parseManifest decodes every object of a rendering.
func parseManifest(t *testing.T, out []byte) manifest {
	t.Helper()
	var m manifest
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("rendered document does not parse: %v\n%s", err, doc)
		}
		if o["kind"] != nil {
			m = append(m, o)
		}
	}
	return m
}

// ofKind is every object of one of kinds.
func (m manifest) ofKind(kinds ...string) []map[string]any {
	var out []map[string]any
	for _, o := range m {
		if slices.Contains(kinds, str(o, "kind")) {
			out = append(out, o)
		}
	}
	return out
}

// find is the object kind namespace/name ("" for a cluster-scoped one), or nil.
func (m manifest) find(kind, namespace, name string) map[string]any {
	for _, o := range m.ofKind(kind) {
		if str(o, "metadata", "name") == name && str(o, "metadata", "namespace") == namespace {
			return o
		}
	}
	return nil
}

// at is the value at path in o, a step being a map key; nil where there is none.
func at(o any, path ...string) any {
	for _, k := range path {
		m, _ := o.(map[string]any)
		o = m[k]
	}
	return o
}

func str(o any, path ...string) string { s, _ := at(o, path...).(string); return s }

func obj(o any, path ...string) map[string]any { m, _ := at(o, path...).(map[string]any); return m }

func list(o any, path ...string) []any { l, _ := at(o, path...).([]any); return l }

// strs is the list at path in o as strings.
func strs(o any, path ...string) []string {
	var out []string
	for _, v := range list(o, path...) {
		s, _ := v.(string)
		out = append(out, s)
	}
	return out
}

// rbacRule is one rule of a Role or ClusterRole.
type rbacRule struct {
	APIGroups       []string `json:"apiGroups"`
	Resources       []string `json:"resources"`
	ResourceNames   []string `json:"resourceNames"`
	Verbs           []string `json:"verbs"`
	NonResourceURLs []string `json:"nonResourceURLs"`
}

// rulesOf is role's rules.
func rulesOf(t *testing.T, role map[string]any) []rbacRule {
	t.Helper()
	b, err := json.Marshal(role["rules"])
	if err != nil {
		t.Fatal(err)
	}
	var rules []rbacRule
	if err := json.Unmarshal(b, &rules); err != nil {
		t.Fatalf("rules of %s %s: %v", str(role, "kind"), str(role, "metadata", "name"), err)
	}
	return rules
}

// access is one request to the authorizer: name "" asks for any object (create, list).
type access struct{ verb, group, resource, namespace, name string }

// grants says whether r allows a, as RBAC matches: "*" in verbs, groups and resources,
// "*/sub" and "res/*" for subresources, resourceNames only for a request that names one.
func (r rbacRule) grants(a access) bool {
	if !match(r.Verbs, a.verb) || !match(r.APIGroups, a.group) {
		return false
	}
	res, sub, _ := strings.Cut(a.resource, "/")
	ok := slices.ContainsFunc(r.Resources, func(have string) bool {
		hr, hs, hasSub := strings.Cut(have, "/")
		if !hasSub {
			return have == "*" || (sub == "" && hr == res)
		}
		return sub != "" && (hr == "*" || hr == res) && (hs == "*" || hs == sub)
	})
	if !ok {
		return false
	}
	return len(r.ResourceNames) == 0 || (a.name != "" && slices.Contains(r.ResourceNames, a.name))
}

func match(have []string, want string) bool {
	return slices.Contains(have, "*") || slices.Contains(have, want)
}

// roleOf is the Role or ClusterRole binding refers to, or nil.
func (m manifest) roleOf(binding map[string]any) map[string]any {
	kind, name := str(binding, "roleRef", "kind"), str(binding, "roleRef", "name")
	if kind == "Role" {
		return m.find("Role", str(binding, "metadata", "namespace"), name)
	}
	return m.find(kind, "", name)
}

// bindsServiceAccount says whether binding names ServiceAccount namespace/name.
func bindsServiceAccount(binding map[string]any, namespace, name string) bool {
	for _, s := range list(binding, "subjects") {
		if str(s, "kind") == "ServiceAccount" && str(s, "name") == name && str(s, "namespace") == namespace {
			return true
		}
	}
	return false
}

// allowed says whether ServiceAccount saNamespace/sa may make a under the rendered roles
// and bindings: a RoleBinding grants in its own namespace, a ClusterRoleBinding in all.
func (m manifest) allowed(t *testing.T, saNamespace, sa string, a access) bool {
	t.Helper()
	for _, b := range m.ofKind("RoleBinding", "ClusterRoleBinding") {
		if !bindsServiceAccount(b, saNamespace, sa) {
			continue
		}
		if str(b, "kind") == "RoleBinding" && str(b, "metadata", "namespace") != a.namespace {
			continue
		}
		role := m.roleOf(b)
		if role == nil {
			continue
		}
		for _, r := range rulesOf(t, role) {
			if r.grants(a) {
				return true
			}
		}
	}
	return false
}

// requireAllowed fails t unless ServiceAccount namespace/sa may make each verb of a.
func (m manifest) requireAllowed(t *testing.T, where, namespace, sa string, a access, verbs ...string) {
	t.Helper()
	for _, v := range verbs {
		a.verb = v
		if !m.allowed(t, namespace, sa, a) {
			t.Errorf("%s: ServiceAccount %s/%s may not %s %s %q in namespace %s: no rendered role bound to it allows it",
				where, namespace, sa, v, a.resource, a.name, a.namespace)
		}
	}
}
