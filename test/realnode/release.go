package realnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	// PublicKey is the cosign public key of the key the release was signed with (empty:
	// not signed).
	PublicKey string
}

// PluginPlatforms are the platforms the test's releases pack `kubectl fence` for: the
// image's, whose builds share the image's compile cache. A release packs Linux, macOS
// and Windows (the Makefile's PLUGIN_PLATFORMS); hack/plugin's tests pack and check the
// krew manifest of them all.
const PluginPlatforms = "linux/amd64,linux/arm64"

// ReleaseRegistry is the REGISTRY of the cluster's releases: the image goes to
// ReleaseRegistry/kubefence, the chart to ReleaseRegistry/charts/kubefence.
func (c *Cluster) ReleaseRegistry() string { return c.Registry + "/kubefence" }

// MakeRelease runs `make release` for version (vX.Y.Z, which CHANGELOG.md must have)
// into the cluster's registry, over plain HTTP, releasing this checkout as it is
// (ALLOW_DIRTY: a test runs on uncommitted changes too), with the files a release writes
// into a checkout and its build directory under the cluster's directory. It signs the
// release with a key pair that cosign generate-key-pair makes for it, whose password only
// cosign and make release's environment see.
func (c *Cluster) MakeRelease(ctx context.Context, version string) (*MadeRelease, error) {
	root, err := sim.ModuleRoot()
	if err != nil {
		return nil, err
	}
	keys := filepath.Join(c.dir, "release-"+version, "key")
	env, err := releaseKey(ctx, root, keys)
	if err != nil {
		return nil, err
	}
	r, err := c.makeRelease(ctx, root, version, env, "ALLOW_DIRTY=1", "COSIGN_KEY="+filepath.Join(keys, "cosign.key"),
		"PLUGIN_PLATFORMS="+PluginPlatforms)
	if err != nil {
		return nil, err
	}
	r.PublicKey = filepath.Join(keys, "cosign.pub")
	return r, nil
}

// Cosign is the cosign CLI that hack/deps.sh builds.
func Cosign(root string) (string, error) {
	p := filepath.Join(root, ".cache", "bin", "cosign")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the cosign CLI: %w (hack/deps.sh cosign builds it)", err)
	}
	return p, nil
}

// releaseKey makes a cosign key pair in dir (cosign.key, cosign.pub) with a random
// password, and returns the environment that hands the password to cosign.
func releaseKey(ctx context.Context, root, dir string) ([]string, error) {
	cosign, err := Cosign(root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	pw := make([]byte, 16)
	if _, err := rand.Read(pw); err != nil {
		return nil, err
	}
	env := []string{"COSIGN_PASSWORD=" + hex.EncodeToString(pw)}
	cmd := exec.CommandContext(ctx, cosign, "generate-key-pair")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cosign generate-key-pair: %w: %s", err, out)
	}
	return env, nil
}

// MakePreviousRelease runs `make release` for version from the commit CHANGELOG.md names
// for it ("Released from commit SHA." in its section), as that commit's Makefile does it:
// in a shared clone of this repository checked out at the commit, with this checkout's
// .cache/ (the Debian packages the image is built from).
func (c *Cluster) MakePreviousRelease(ctx context.Context, version string) (*MadeRelease, error) {
	root, err := sim.ModuleRoot()
	if err != nil {
		return nil, err
	}
	commit, err := ReleaseCommit(filepath.Join(root, imagebuild.ChangelogFile), version)
	if err != nil {
		return nil, err
	}
	src := filepath.Join(c.dir, "release-"+version, "src")
	for _, args := range [][]string{{"clone", "-q", "--shared", "--no-checkout", root, src}, {"-C", src, "checkout", "-q", "--detach", commit}} {
		if out, err := exec.CommandContext(ctx, "git", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("git %s: %w: %s (a clone without %s's history: git fetch --unshallow)", strings.Join(args, " "), err, out, version)
		}
	}
	if err := os.Symlink(filepath.Join(root, ".cache"), filepath.Join(src, ".cache")); err != nil {
		return nil, err
	}
	return c.makeRelease(ctx, src, version, nil)
}

// ReleaseCommit is the commit that CHANGELOG.md's section for version names.
func ReleaseCommit(changelog, version string) (string, error) {
	b, err := os.ReadFile(changelog)
	if err != nil {
		return "", err
	}
	_, section, ok := strings.Cut(string(b), "\n## "+version+"\n")
	if !ok {
		return "", fmt.Errorf("%s: no section ## %s", changelog, version)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	m := regexp.MustCompile(`Released from commit ([0-9a-f]{40})\.`).FindStringSubmatch(section)
	if m == nil {
		return "", fmt.Errorf("%s: section ## %s names no commit (\"Released from commit SHA.\")", changelog, version)
	}
	return m[1], nil
}

// makeRelease runs make release for version in the checkout root, with env added to
// this process's environment and extra make variables.
func (c *Cluster) makeRelease(ctx context.Context, root, version string, env []string, extra ...string) (*MadeRelease, error) {
	out := filepath.Join(c.dir, "release-"+version)
	r := &MadeRelease{Tree: filepath.Join(out, "tree"), Dir: filepath.Join(out, "bin", "release", version)}
	logFile := filepath.Join(out, "make-release.log")
	if err := os.MkdirAll(r.Tree, 0o755); err != nil {
		return nil, err
	}
	log, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, "make", append([]string{"-C", root, "release", "VERSION=" + version, "REGISTRY=" + c.ReleaseRegistry(),
		"INSECURE=1", "RELEASE_TREE=" + r.Tree, "BIN=" + filepath.Join(out, "bin")}, extra...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
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
