package imagebuild

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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

// BuildBinaries builds every Commands entry from the module in srcDir into outDir, as
// the Dockerfile does: static (CGO_ENABLED=0) for linux/amd64, -buildvcs=false,
// stripped, with version and revision stamped into pkg/buildinfo; -trimpath when trim
// is set (a release; without it the build shares the compile cache of `make build` and
// `make test`, which export CGO_ENABLED=0 too). goCmd is the go command ("go" when
// empty); go's output goes to log.
func BuildBinaries(ctx context.Context, goCmd, srcDir, outDir, version, revision string, trim bool, log io.Writer) error {
	if goCmd == "" {
		goCmd = "go"
	}
	ldflags := fmt.Sprintf("-s -w -X %s.version=%s -X %s.revision=%s", BuildinfoPkg, version, BuildinfoPkg, revision)
	// One go build per binary would link them one after another; one invocation with an
	// output directory builds them in parallel, each named after its package's directory.
	args := []string{"build", "-buildvcs=false", "-ldflags", ldflags, "-o", outDir + string(filepath.Separator)}
	if trim {
		args = append(args[:1], append([]string{"-trimpath"}, args[1:]...)...)
	}
	for _, c := range Commands {
		args = append(args, c.Pkg)
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = srcDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", goCmd, strings.Join(args, " "), err)
	}
	for _, c := range Commands {
		built := filepath.Join(outDir, filepath.Base(c.Pkg))
		if built == filepath.Join(outDir, c.Name) {
			continue
		}
		if err := os.Rename(built, filepath.Join(outDir, c.Name)); err != nil {
			return err
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
