package imagebuild

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"
)

// BuildinfoPkg holds the version and revision that -X sets in every binary.
const BuildinfoPkg = "github.com/kubefence/kubefence/pkg/buildinfo"

// ChartFile is the Helm chart's Chart.yaml, relative to the repository root.
const ChartFile = "deploy/helm/kubefence/Chart.yaml"

// BuildBinaries builds every Commands entry for linux/amd64 as BinarySpec.Build does,
// without -trimpath unless trim is set (without it the build shares the compile cache of
// `make build` and `make test`, which export CGO_ENABLED=0 too).
func BuildBinaries(ctx context.Context, goCmd, srcDir, outDir, version, revision string, trim bool, log io.Writer) error {
	return BinarySpec{Go: goCmd, Src: srcDir, Out: outDir, Version: version, Revision: revision, Trim: trim, Log: log}.Build(ctx)
}

// BinarySpec says how to build the image's binaries.
type BinarySpec struct {
	// Go is the go command ("go" when empty); Src the module's root; Out where the
	// binaries go, named as in the image.
	Go, Src, Out string
	// Version and Revision are stamped into pkg/buildinfo.
	Version, Revision string
	// Arch is the GOARCH; empty means amd64.
	Arch string
	// Trim builds with -trimpath, as a release does: no path of the build machine ends
	// up in a binary, so two checkouts of one commit build the same bytes.
	Trim bool
	// Log receives go's output.
	Log io.Writer
}

// Build builds every Commands entry as the image holds them: static (CGO_ENABLED=0) for
// linux, -buildvcs=false (the revision is stamped instead, so that a build from a
// tarball of the source equals one from a clone), stripped, with version and revision
// stamped into pkg/buildinfo.
func (s BinarySpec) Build(ctx context.Context) error {
	goCmd, arch := s.Go, s.Arch
	if goCmd == "" {
		goCmd = "go"
	}
	if arch == "" {
		arch = "amd64"
	}
	ldflags := fmt.Sprintf("-s -w -X %s.version=%s -X %s.revision=%s", BuildinfoPkg, s.Version, BuildinfoPkg, s.Revision)
	// One go build per binary would link them one after another; one invocation with an
	// output directory builds them in parallel, each named after its package's directory.
	args := []string{"build", "-buildvcs=false", "-ldflags", ldflags, "-o", s.Out + string(filepath.Separator)}
	if s.Trim {
		args = append(args[:1], append([]string{"-trimpath"}, args[1:]...)...)
	}
	for _, c := range Commands {
		args = append(args, c.Pkg)
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = s.Src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = s.Log, s.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("GOARCH=%s %s %s: %w", arch, goCmd, strings.Join(args, " "), err)
	}
	for _, c := range Commands {
		built := filepath.Join(s.Out, filepath.Base(c.Pkg))
		if err := noTestpoints(built); err != nil {
			return err
		}
		if built == filepath.Join(s.Out, c.Name) {
			continue
		}
		if err := os.Rename(built, filepath.Join(s.Out, c.Name)); err != nil {
			return err
		}
	}
	return nil
}

// TestpointsTag is pkg/testpoint.BuildTag: a binary built with it stops itself where an
// environment variable says (the end-to-end tests' pause points). The image's binaries
// never carry it, whatever GOFLAGS or go env says.
const TestpointsTag = "kubefence_testpoints"

// noTestpoints fails when the binary at path was built with TestpointsTag.
func noTestpoints(path string) error {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("build info of %s: %w", path, err)
	}
	for _, set := range bi.Settings {
		if set.Key == "-tags" && slices.Contains(strings.Split(set.Value, ","), TestpointsTag) {
			return fmt.Errorf("%s was built with -tags=%s (from GOFLAGS?): a release carries no test pause points", path, set.Value)
		}
	}
	return nil
}

// ChartAppVersion is the appVersion of the chart at chartYAML: the image tag the chart
// pulls when values.yaml's image.tag is empty.
func ChartAppVersion(chartYAML string) (string, error) {
	data, err := os.ReadFile(chartYAML)
	if err != nil {
		return "", err
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		return "", fmt.Errorf("%s: %w", chartYAML, err)
	}
	if chart.AppVersion == "" {
		return "", fmt.Errorf("%s: no appVersion", chartYAML)
	}
	return chart.AppVersion, nil
}

// Git describes the checkout in dir as the Makefile does: version is
// `git describe --tags --always --dirty`, revision the commit, created the commit's
// time (SOURCE_DATE_EPOCH, when set, takes its place).
func Git(dir string) (version, revision string, created time.Time, err error) {
	run := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), exitText(err))
		}
		return strings.TrimSpace(string(out)), nil
	}
	if version, err = run("describe", "--tags", "--always", "--dirty"); err != nil {
		return "", "", time.Time{}, err
	}
	if revision, err = run("rev-parse", "HEAD"); err != nil {
		return "", "", time.Time{}, err
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = run("log", "-1", "--format=%ct", "HEAD"); err != nil {
			return "", "", time.Time{}, err
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return "", "", time.Time{}, fmt.Errorf("commit time %q: %w", epoch, err)
	}
	return version, revision, time.Unix(secs, 0).UTC(), nil
}

// Tags are repo:tag for each tag, in order, once each: the chart's appVersion first,
// then the version.
func Tags(repo string, tags []string, opts ...name.Option) ([]name.Tag, error) {
	if _, err := name.NewRepository(repo, opts...); err != nil {
		return nil, fmt.Errorf("repository %q (a repository, without a tag): %w", repo, err)
	}
	var out []name.Tag
	seen := map[string]bool{}
	for _, t := range tags {
		if seen[t] {
			continue
		}
		seen[t] = true
		tag, err := name.NewTag(repo+":"+t, opts...)
		if err != nil {
			return nil, fmt.Errorf("tag %q: %w", t, err)
		}
		out = append(out, tag)
	}
	return out, nil
}

// exitText adds a failed command's stderr to its error.
func exitText(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(bytes.TrimSpace(ee.Stderr)) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}
