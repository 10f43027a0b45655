package main

import (
	"slices"
	"testing"
)

func TestViolations(t *testing.T) {
	const mod = "example.com/m"
	pkgs := []pkgDeps{
		{Path: mod + "/pkg/apis/v1", Deps: []string{"fmt", mod + "/pkg/apis/v1/sub"}},
		{Path: mod + "/pkg/apis/bad", Deps: []string{mod + "/pkg/policy"}},
		{Path: mod + "/pkg/policy", Deps: []string{"k8s.io/apimachinery/pkg/util/sets", mod + "/pkg/apis/v1"}},
		{Path: mod + "/pkg/policyx", Deps: []string{"k8s.io/client-go/kubernetes"}},
		{Path: mod + "/pkg/fenceagent/ipmi", Deps: []string{mod + "/pkg/plugin", "k8s.io/klog/v2"}},
		{Path: mod + "/pkg/fencer", Deps: []string{mod + "/pkg/podrelease"}},
		{Path: mod + "/pkg/util", Deps: []string{mod + "/test/sim", mod + "/hack/images", mod + "/cmdline"}},
		{Path: mod + "/pkg/podrelease", Deps: []string{mod + "/pkg/internal/fixture"}},
		{Path: mod + "/pkg/internal/fixture", Deps: []string{mod + "/pkg/apis/fencing/v1alpha1", "k8s.io/client-go/kubernetes/fake"}},
		{Path: mod + "/cmd/x", Deps: []string{mod + "/test/sim"}},
	}
	got, err := violations(mod, rules, pkgs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"pkg/apis/bad imports example.com/m/pkg/policy: API types stand alone",
		"pkg/fenceagent/ipmi imports k8s.io/klog/v2: agents know no Kubernetes",
		"pkg/fencer imports example.com/m/pkg/podrelease: the state machine does not reach into its wiring",
		"pkg/util imports example.com/m/test/sim: libraries never import binaries, tests or tools",
		"pkg/util imports example.com/m/hack/images: libraries never import binaries, tests or tools",
		"pkg/podrelease imports example.com/m/pkg/internal/fixture: the shared fixture is for tests; production code never imports it",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n got %q\nwant %q", got, want)
	}
}

func TestBadRule(t *testing.T) {
	if _, err := violations("m", []rule{{Dir: "pkg", Forbidden: "("}}, nil); err == nil {
		t.Error("a rule whose pattern does not compile was accepted")
	}
}
