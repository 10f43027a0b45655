package realnode

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kubefence/kubefence/test/sim"
)

// TestOldestKubeVersionIsTheChartsFloor: the chart admits what make test proves. Its
// kubeVersion's floor is OldestKubeVersion's minor release, which hack/deps.sh builds and
// TestPlannedRebootOnRealNodes runs on.
func TestOldestKubeVersionIsTheChartsFloor(t *testing.T) {
	root, err := sim.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	chart, err := os.ReadFile(filepath.Join(root, "deploy", "helm", "kubefence", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^kubeVersion: ">=1\.(\d+)\.0-0"$`).FindSubmatch(chart)
	if m == nil {
		t.Fatalf("Chart.yaml: no kubeVersion of the form \">=1.N.0-0\"")
	}
	if want := "v1." + string(m[1]) + "."; !strings.HasPrefix(OldestKubeVersion, want) {
		t.Errorf("the chart admits Kubernetes 1.%s and later, but the oldest real-node test runs on %s", m[1], OldestKubeVersion)
	}
	deps, err := os.ReadFile(filepath.Join(root, "hack", "deps.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(deps), "KUBE_VERSION="+OldestKubeVersion+" ") {
		t.Errorf("hack/deps.sh does not build Kubernetes %s", OldestKubeVersion)
	}
}
