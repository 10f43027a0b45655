package main

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestRenderPeopleRolesAndWords: by default the chart renders the view, requester and
// on-call ClusterRoles and the admission policies of force, confirm-off and cancel; each
// can be left out. Powering a node off takes a permission none of Kubernetes' own roles
// carries (docs/DESIGN invariant 14): no role the chart aggregates into view, edit or
// admin may ask for a fence or give a word, only the requester and on-call roles, which
// are bound on purpose.
func TestRenderPeopleRolesAndWords(t *testing.T) {
	policies := []string{"kubefence-cancel", "kubefence-confirm-off", "kubefence-force", "kubefence-requested-by"}
	for name, tc := range map[string]struct {
		values         map[string]any
		roles, polices []string
	}{
		"defaults": {nil, []string{"kubefence-view", "kubefence-requester", "kubefence-oncall"}, policies},
		"every part on": {everyPartOn(nil), []string{"kubefence-view", "kubefence-requester", "kubefence-oncall"},
			[]string{"kubefence-cancel", "kubefence-confirm-off", "kubefence-force", "kubefence-node-agent-report", "kubefence-requested-by"}},
		"no user roles": {map[string]any{"userRoles": map[string]any{"enabled": false}}, nil, policies},
		"no word policies": {map[string]any{"confirmOffPolicy": map[string]any{"enabled": false}, "cancelPolicy": map[string]any{"enabled": false}},
			[]string{"kubefence-view", "kubefence-requester", "kubefence-oncall"}, []string{"kubefence-force", "kubefence-requested-by"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := Render(chartDir, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			m := parseManifest(t, out)
			var people []string
			for _, r := range m.ofKind("ClusterRole") {
				if n := str(r, "metadata", "name"); strings.HasSuffix(n, "-view") || strings.HasSuffix(n, "-edit") ||
					strings.HasSuffix(n, "-requester") || strings.HasSuffix(n, "-oncall") {
					people = append(people, n)
				}
			}
			if !slices.Equal(people, tc.roles) {
				t.Errorf("people's ClusterRoles %v, want %v", people, tc.roles)
			}
			var got []string
			for _, p := range m.ofKind("ValidatingAdmissionPolicy") {
				got = append(got, str(p, "metadata", "name"))
			}
			if !slices.Equal(got, tc.polices) {
				t.Errorf("admission policies %v, want %v", got, tc.polices)
			}
			if n := len(m.ofKind("ValidatingAdmissionPolicyBinding")); n != len(tc.polices) {
				t.Errorf("%d bindings for %d policies", n, len(tc.polices))
			}
			checkAggregatedRolesPowerNothing(t, m)
			if tc.roles != nil {
				checkAsksForFences(t, m, "kubefence-requester")
				checkAsksForFences(t, m, "kubefence-oncall")
			}
		})
	}
}

// powerVerbs are the requests that power a node off or give a word on an incident: a
// NodeFence asked for, changed (retry, force, confirm-off and cancel are annotations) or
// deleted, the virtual subresources the admission policies check, and a pause lifted or
// set in the pause ConfigMap.
func powerVerbs() []access {
	var out []access
	for _, res := range []string{"nodefences", "nodefences/status", "nodefences/force", "nodefences/confirm", "nodefences/cancel"} {
		for _, verb := range []string{"create", "update", "patch", "delete"} {
			out = append(out, access{verb: verb, group: "fencing.kubefence.io", resource: res})
		}
	}
	for _, verb := range []string{"update", "patch"} {
		out = append(out, access{verb: verb, group: "", resource: "configmaps", name: "kubefence-pause"})
	}
	return out
}

// checkAggregatedRolesPowerNothing: no ClusterRole labelled to aggregate into Kubernetes'
// view, edit or admin grants any of powerVerbs.
func checkAggregatedRolesPowerNothing(t *testing.T, m manifest) {
	t.Helper()
	for _, r := range m.ofKind("ClusterRole") {
		labels := obj(r, "metadata", "labels")
		var into []string
		for _, builtin := range []string{"view", "edit", "admin"} {
			if labels["rbac.authorization.k8s.io/aggregate-to-"+builtin] == "true" {
				into = append(into, builtin)
			}
		}
		if into == nil {
			continue
		}
		for _, rule := range rulesOf(t, r) {
			for _, a := range powerVerbs() {
				if rule.grants(a) {
					t.Errorf("ClusterRole %s aggregates into %v and may %s %s %s", str(r, "metadata", "name"), into, a.verb, a.resource, a.name)
				}
			}
		}
	}
}

// checkAsksForFences: ClusterRole name is rendered and may create and read NodeFences.
func checkAsksForFences(t *testing.T, m manifest, name string) {
	t.Helper()
	role := m.find("ClusterRole", "", name)
	if role == nil {
		t.Errorf("no ClusterRole %s", name)
		return
	}
	for _, verb := range []string{"create", "get", "list", "watch"} {
		a := access{verb: verb, group: "fencing.kubefence.io", resource: "nodefences"}
		if !slices.ContainsFunc(rulesOf(t, role), func(r rbacRule) bool { return r.grants(a) }) {
			t.Errorf("ClusterRole %s may not %s nodefences", name, verb)
		}
	}
}

// TestRenderWordPolicies: each word's admission policy carries the label the controller
// finds it by (fencing.kubefence.io/word), fails closed and is bound with Deny, so the
// controller trusts the check it made when the word was set (pkg/oncall.PolicyInForce);
// no other policy carries the label. Whether metrics are secure or not, and with the
// policies or without, the controller may read the policies and their bindings and ask
// a SubjectAccessReview (of a word's author, when no policy is in force); TokenReviews
// only for secure metrics.
func TestRenderWordPolicies(t *testing.T) {
	const label = "fencing.kubefence.io/word"
	noPolicies := map[string]any{"confirmOffPolicy": map[string]any{"enabled": false}, "cancelPolicy": map[string]any{"enabled": false}}
	for name, tc := range map[string]struct {
		values           map[string]any
		secure, policies bool
	}{
		"default":                                {nil, true, true},
		"metrics.secure=false":                   {map[string]any{"metrics": map[string]any{"secure": false}}, false, true},
		"no word policies, metrics.secure=false": {map[string]any{"metrics": map[string]any{"secure": false}, "confirmOffPolicy": noPolicies["confirmOffPolicy"], "cancelPolicy": noPolicies["cancelPolicy"]}, false, false},
		"no word policies":                       {noPolicies, true, false},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := RenderAs(chartDir, tc.values, "fencing", "ops")
			if err != nil {
				t.Fatal(err)
			}
			m := parseManifest(t, out)
			deployments := m.ofKind("Deployment")
			if len(deployments) != 1 {
				t.Fatalf("%d Deployments, want the controller's", len(deployments))
			}
			sa := str(deployments[0], "spec", "template", "spec", "serviceAccountName")
			m.requireAllowed(t, name, "ops", sa, access{group: "authorization.k8s.io", resource: "subjectaccessreviews"}, "create")
			for _, res := range []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"} {
				m.requireAllowed(t, name, "ops", sa, access{group: "admissionregistration.k8s.io", resource: res}, "get", "list")
			}
			if got := m.allowed(t, "ops", sa, access{verb: "create", group: "authentication.k8s.io", resource: "tokenreviews"}); got != tc.secure {
				t.Errorf("the controller may create tokenreviews: %v, want %v", got, tc.secure)
			}
			labelled := map[string]string{}
			for _, p := range m.ofKind("ValidatingAdmissionPolicy") {
				if w := str(p, "metadata", "labels", label); w != "" {
					labelled[w] = str(p, "metadata", "name")
				}
			}
			want := map[string]string{}
			if tc.policies {
				want = map[string]string{"confirm-off": "fencing-kubefence-confirm-off", "cancel": "fencing-kubefence-cancel"}
			}
			if !maps.Equal(labelled, want) {
				t.Errorf("policies labelled %s: %v, want %v", label, labelled, want)
			}
			for word, policy := range want {
				if fp := str(m.find("ValidatingAdmissionPolicy", "", policy), "spec", "failurePolicy"); fp != "Fail" {
					t.Errorf("policy of %s: failurePolicy %q, want Fail", word, fp)
				}
				if !slices.ContainsFunc(m.ofKind("ValidatingAdmissionPolicyBinding"), func(b map[string]any) bool {
					return str(b, "spec", "policyName") == policy && slices.Contains(strs(b, "spec", "validationActions"), "Deny")
				}) {
					t.Errorf("policy %s of %s has no binding with validationActions Deny", policy, word)
				}
			}
		})
	}
}
