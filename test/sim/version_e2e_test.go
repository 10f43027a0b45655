package sim

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestVersionStamped: one -ldflags stamp (as make build and make images
// give it) reaches the controller's --version and every agent's -version.
func TestVersionStamped(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	const stamp = "v0.0.0-stamp.1"
	dir := t.TempDir()
	cmds := []string{"fence-controller", "fence-agent-ipmi", "fence-agent-cloud", "fence-agent-iscsi", "fence-agent-exec"}
	args := []string{"build", "-ldflags", "-X github.com/kubefence/kubefence/pkg/buildinfo.version=" + stamp, "-o", dir + "/"}
	for _, c := range cmds {
		args = append(args, "./cmd/"+c)
	}
	build := exec.CommandContext(ctx, "go", args...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, c := range cmds {
		flag := "-version"
		if c == "fence-controller" {
			flag = "--version"
		}
		out, err := exec.CommandContext(ctx, filepath.Join(dir, c), flag).CombinedOutput()
		if err != nil || !strings.Contains(string(out), stamp) {
			t.Errorf("%s %s = %q, %v; want the version %s", c, flag, out, err, stamp)
		}
	}
}
