package main

import (
	"slices"
	"strings"
	"testing"
)

// TestRenderPeopleRolesAndWords: by default the chart renders the view, edit and on-call
// ClusterRoles and the admission policies of force, confirm-off and cancel; each can be
// left out.
func TestRenderPeopleRolesAndWords(t *testing.T) {
	for name, tc := range map[string]struct {
		values         map[string]any
		roles, polices []string
	}{
		"defaults": {nil, []string{"kubefence-view", "kubefence-edit", "kubefence-oncall"},
			[]string{"kubefence-cancel", "kubefence-confirm-off", "kubefence-force", "kubefence-requested-by"}},
		"no user roles": {map[string]any{"userRoles": map[string]any{"enabled": false}}, nil,
			[]string{"kubefence-cancel", "kubefence-confirm-off", "kubefence-force", "kubefence-requested-by"}},
		"no word policies": {map[string]any{"confirmOffPolicy": map[string]any{"enabled": false}, "cancelPolicy": map[string]any{"enabled": false}},
			[]string{"kubefence-view", "kubefence-edit", "kubefence-oncall"}, []string{"kubefence-force", "kubefence-requested-by"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := Render(chartDir, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			byKind := decode(t, out)
			names := func(kind string, keep func(string) bool) []string {
				var got []string
				for _, o := range byKind[kind] {
					if n, _ := o.Metadata["name"].(string); keep(n) {
						got = append(got, n)
					}
				}
				return got
			}
			people := func(n string) bool {
				return strings.HasSuffix(n, "-view") || strings.HasSuffix(n, "-edit") || strings.HasSuffix(n, "-oncall")
			}
			if got := names("ClusterRole", people); !slices.Equal(got, tc.roles) {
				t.Errorf("people's ClusterRoles %v, want %v", got, tc.roles)
			}
			if got := names("ValidatingAdmissionPolicy", func(string) bool { return true }); !slices.Equal(got, tc.polices) {
				t.Errorf("admission policies %v, want %v", got, tc.polices)
			}
			if len(byKind["ValidatingAdmissionPolicyBinding"]) != len(tc.polices) {
				t.Errorf("%d bindings for %d policies", len(byKind["ValidatingAdmissionPolicyBinding"]), len(tc.polices))
			}
		})
	}
}
