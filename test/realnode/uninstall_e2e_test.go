package realnode

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kubefence/kubefence/test/sim"
)

// The markers in docs/getting-started.md's Uninstall section before the blocks
// uninstallAsDocumented runs.
const (
	uninstallLogMarker    = "<!-- run by TestPlannedRebootOnRealNodes (test/realnode) as written: the refused uninstall's log -->"
	uninstallCRDsMarker   = "<!-- run by TestPlannedRebootOnRealNodes (test/realnode) as written: the CRDs -->"
	uninstallLeasesMarker = "<!-- run by TestPlannedRebootOnRealNodes (test/realnode) as written: the Leases -->"
)

// uninstallAsDocumented uninstalls the release as getting-started's Uninstall section says,
// with target left powered off and its incident nf open (Remediated): helm uninstall is
// refused and leaves the release running, the check's log names the incident and its
// node, the node is powered on and recovers, the uninstall goes through, and the commands
// that remove what stays behind (the Leases, the CRDs) run as written.
func uninstallAsDocumented(t *testing.T, ctx context.Context, c *Cluster, target, nf, oldBoot string) {
	t.Helper()
	out, err := c.Helm(ctx, "uninstall", Release, "-n", Namespace, "--wait", "--timeout", "5m")
	if err == nil {
		t.Fatalf("helm uninstall went through with NodeFence %s open and %s powered off: %s", nf, target, out)
	}
	t.Logf("helm uninstall, refused as it should be: %s", firstLines(out, 3))
	if _, err := c.Helm(ctx, "status", Release, "-n", Namespace); err != nil {
		t.Fatalf("after the refused uninstall the release is gone: %v", err)
	}
	if _, err := c.Client.AppsV1().Deployments(Namespace).Get(ctx, Fullname+"-controller", metav1.GetOptions{}); err != nil {
		t.Fatalf("after the refused uninstall the controller's Deployment: %v", err)
	}
	doc := gettingStarted(t)
	log := runDocCommands(t, ctx, c, docBlock(t, doc, uninstallLogMarker, "sh"))
	for _, want := range []string{"NodeFence " + nf, target} {
		if !strings.Contains(log, want) {
			t.Errorf("the uninstall check's log does not name %q:\n%s", want, log)
		}
	}

	// As the log and the docs say: power the node on and let its incident recover.
	powerOnAndRecover(t, ctx, c, target, nf, oldBoot)
	uninstall(t, ctx, c, []string{nf})

	runDocCommands(t, ctx, c, docBlock(t, doc, uninstallLeasesMarker, "sh"))
	if _, err := c.Client.CoordinationV1().Leases(Namespace).Get(ctx, controllerName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the leader Lease %s after the docs' command: %v, want it gone", controllerName, err)
	}
	runDocCommands(t, ctx, c, docBlock(t, doc, uninstallCRDsMarker, "sh"))
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	waitFor(t, ctx, "kubefence's CRDs gone", func() (bool, error) {
		list, err := crds.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var left []string
		for _, crd := range list.Items {
			if strings.HasSuffix(crd.GetName(), ".fencing.kubefence.io") {
				left = append(left, crd.GetName())
			}
		}
		return len(left) == 0, fmt.Errorf("CRDs left: %v", left)
	})
}

// runDocCommands runs a block of getting-started with bash, kubectl and helm, as written
// but for the release's names: the doc's (release kubefence, whose fullname is
// kubefence) become this test's (Release, Fullname, Namespace). It returns the output.
func runDocCommands(t *testing.T, ctx context.Context, c *Cluster, block string) string {
	t.Helper()
	root, err := sim.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(root, ".cache", "controlplane", sim.KubeVersion, "bin", "kubectl")
	helm, err := helmBin()
	if err != nil {
		t.Fatal(err)
	}
	script := strings.NewReplacer(
		"job/kubefence-uninstall-check", "job/"+Fullname+"-uninstall-check",
		"lease kubefence-controller", "lease "+controllerName,
		"-n "+DocNamespace, "-n "+Namespace,
		"helm uninstall kubefence ", "helm uninstall "+Release+" ",
	).Replace(block)
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Env = []string{"KUBECONFIG=" + c.Kubeconfig, "HOME=" + t.TempDir(),
		"PATH=" + filepath.Dir(kubectl) + ":" + filepath.Dir(helm) + ":/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("getting-started's commands failed: %v\n%s\noutput:\n%s", err, script, out)
	}
	t.Logf("ran getting-started's commands:\n%s\n%s", script, firstLines(string(out), 12))
	return string(out)
}
