package app

import (
	"testing"

	"github.com/kubefence/kubefence/pkg/buildinfo"
)

// TestBuildInfoMetric: every registry carries kubefence_build_info with the build's
// version, revision and Go version.
func TestBuildInfoMetric(t *testing.T) {
	families, err := newRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "kubefence_build_info" {
			continue
		}
		labels := map[string]string{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != buildinfo.Version() || labels["goversion"] != buildinfo.GoVersion() || labels["revision"] == "" {
			t.Errorf("kubefence_build_info labels %v", labels)
		}
		return
	}
	t.Errorf("no kubefence_build_info")
}
