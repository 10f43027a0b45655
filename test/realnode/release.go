package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kubefence/kubefence/hack/images/imagebuild"
	"github.com/kubefence/kubefence/test/sim"
)

// MadeRelease is a release as a maintainer cuts one (make release), into the cluster's registry.
type MadeRelease struct {
	imagebuild.Released
	// Tree holds the files the release writes into a checkout (deploy/manifests,
	// deploy/release-values.yaml, Chart.yaml, deploy/kustomize), written here instead of
	// this checkout; Dir the release's directory (release.json, SBOMs, the chart's .tgz).
	Tree, Dir string
	// Took is how long make release ran.
	Took time.Duration
}

// ReleaseRegistry is the REGISTRY of the cluster's releases: the image goes to
// ReleaseRegistry/kubefence, the chart to ReleaseRegistry/charts/kubefence.
func (c *Cluster) ReleaseRegistry() string { return c.Registry + "/kubefence" }

// MakeRelease runs `make release` for version (vX.Y.Z, which CHANGELOG.md must have)
// into the cluster's registry, over plain HTTP, releasing this checkout as it is
// (ALLOW_DIRTY: a test runs on uncommitted changes too), with the files a release writes
// into a checkout and its build directory under the cluster's directory.
func (c *Cluster) MakeRelease(ctx context.Context, version string) (*MadeRelease, error) {
	root, err := sim.ModuleRoot()
	if err != nil {
		return nil, err
	}
	r := &MadeRelease{Tree: filepath.Join(c.dir, "release", "tree"), Dir: filepath.Join(c.dir, "release", "bin", "release", version)}
	logFile := filepath.Join(c.dir, "release", "make-release.log")
	if err := os.MkdirAll(r.Tree, 0o755); err != nil {
		return nil, err
	}
	log, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, "make", "-C", root, "release", "VERSION="+version, "REGISTRY="+c.ReleaseRegistry(),
		"INSECURE=1", "ALLOW_DIRTY=1", "RELEASE_TREE="+r.Tree, "BIN="+filepath.Join(c.dir, "release", "bin"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.WaitDelay = time.Second
	start := time.Now()
	if err := cmd.Run(); err != nil {
		tail, _ := os.ReadFile(logFile)
		return nil, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, lastLines(string(tail), 30))
	}
	r.Took = time.Since(start)
	data, err := os.ReadFile(filepath.Join(r.Dir, imagebuild.ReleaseFile))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &r.Released); err != nil {
		return nil, err
	}
	return r, nil
}

// InstallRelease creates the BMC Secret and node annotations of docs/getting-started.md
// and installs the released chart from the registry, as a user does, with only the
// image's registry set (a mirror of the release's registry; empty: the release's own).
func (c *Cluster) InstallRelease(ctx context.Context, r *MadeRelease, registry string, values ...string) (string, error) {
	if err := c.PrepareBMCAccess(ctx); err != nil {
		return "", err
	}
	args := []string{"install", Release, r.Chart, "--version", r.ChartVersion, "-n", Namespace, "--wait", "--timeout", "5m"}
	if r.Insecure {
		args = append(args, "--plain-http")
	}
	if registry != "" {
		args = append(args, "--set", "image.registry="+registry)
	}
	for _, v := range values {
		args = append(args, "-f", v)
	}
	return c.Helm(ctx, args...)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
