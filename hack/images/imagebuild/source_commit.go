package imagebuild

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ChangelogFile is the changelog, relative to the repository root: a release needs a
// section "## vX.Y.Z" in it.
const ChangelogFile = "CHANGELOG.md"

// releaseVersion is a release's version: v, then SemVer without build metadata (an OCI
// tag cannot hold "+").
var releaseVersion = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// ChartVersion checks a release version (v0.2.0, v1.0.0-rc.1) and returns the chart's
// version and appVersion for it: the same without the v, as SemVer has it.
func ChartVersion(version string) (string, error) {
	if !releaseVersion.MatchString(version) {
		return "", fmt.Errorf("VERSION %q: a release version is v followed by SemVer without build metadata, e.g. v0.2.0 or v1.0.0-rc.1", version)
	}
	return strings.TrimPrefix(version, "v"), nil
}

// CheckChangelog fails unless the changelog at file has a section for version: a line
// "## VERSION", maybe followed by a date.
func CheckChangelog(file, version string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("a release needs its %s entry: %w", ChangelogFile, err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if head, ok := strings.CutPrefix(s.Text(), "## "+version); ok && (head == "" || strings.HasPrefix(head, " ")) {
			return nil
		}
	}
	if err := s.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%s has no section \"## %s\": write what the release changes first", file, version)
}

// SourceCommit is the commit a release's image is built from.
type SourceCommit struct {
	// Revision is the newest commit that changed anything the image is built from, with
	// "-dirty" when the working tree changes it further.
	Revision string
	// Created is that commit's time (or SOURCE_DATE_EPOCH): the image's and every file's.
	Created time.Time
	Dirty   bool
}

// ReleaseSource finds the commit of the image's inputs in the repository at src: the
// directories of the main module's packages that the image's commands build (their
// tests and test data left out), go.mod, go.sum, and hack/images with its lock. A later
// commit that only changes other files (the chart, docs, the rendered manifests a
// release writes) builds the same image, with the same digest.
func ReleaseSource(ctx context.Context, goCmd, src string) (SourceCommit, error) {
	inputs, err := imageInputs(ctx, goCmd, src)
	if err != nil {
		return SourceCommit{}, err
	}
	return sourceCommitOf(ctx, src, inputs)
}

// sourceCommitOf finds the newest commit of the repository at src that changed inputs
// (git pathspecs), tests and test data left out.
func sourceCommitOf(ctx context.Context, src string, inputs []string) (SourceCommit, error) {
	spec := append([]string{"--"}, inputs...)
	spec = append(spec, ":(exclude,glob)**/*_test.go", ":(exclude,glob)**/testdata/**")
	out, err := git(ctx, src, append([]string{"log", "-1", "--format=%H %ct"}, spec...)...)
	if err != nil {
		return SourceCommit{}, err
	}
	rev, ct, ok := strings.Cut(out, " ")
	if !ok {
		return SourceCommit{}, fmt.Errorf("git log of %s: no commit", strings.Join(inputs, " "))
	}
	epoch := ct
	if e := os.Getenv("SOURCE_DATE_EPOCH"); e != "" {
		epoch = e
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return SourceCommit{}, fmt.Errorf("commit time %q: %w", epoch, err)
	}
	status, err := git(ctx, src, append([]string{"status", "--porcelain"}, spec...)...)
	if err != nil {
		return SourceCommit{}, err
	}
	sc := SourceCommit{Revision: rev, Created: time.Unix(secs, 0).UTC(), Dirty: status != ""}
	if sc.Dirty {
		sc.Revision += "-dirty"
	}
	return sc, nil
}

// imageInputs lists, relative to src, what the image is built from.
func imageInputs(ctx context.Context, goCmd, src string) ([]string, error) {
	abs, err := filepath.Abs(src)
	if err != nil {
		return nil, err
	}
	dirs := []string{"go.mod", "go.sum", "hack/images"}
	for _, a := range Arches {
		args := []string{"list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}"}
		for _, c := range Commands {
			args = append(args, c.Pkg)
		}
		cmd := exec.CommandContext(ctx, goCmd, args...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+a.Name)
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go list the image's packages: %w", exitText(err))
		}
		for _, d := range strings.Fields(string(out)) {
			rel, err := filepath.Rel(abs, d)
			if err != nil || strings.HasPrefix(rel, "..") {
				return nil, fmt.Errorf("package directory %s is outside %s", d, abs)
			}
			if !slices.Contains(dirs, filepath.ToSlash(rel)) {
				dirs = append(dirs, filepath.ToSlash(rel))
			}
		}
	}
	if len(dirs) == 3 {
		return nil, errors.New("go list found no package of the module")
	}
	slices.Sort(dirs)
	return dirs, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), exitText(err))
	}
	return strings.TrimSpace(string(out)), nil
}
