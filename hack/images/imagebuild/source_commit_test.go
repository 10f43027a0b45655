package imagebuild

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSourceCommit: the image's revision is the newest commit that changed its inputs;
// a commit of other files (what a release commit holds) or of tests leaves it, a change
// to an input moves it, and an uncommitted one marks it dirty.
func TestSourceCommit(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	commit := func(file, content string) string {
		t.Helper()
		p := filepath.Join(dir, file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", file)
		git("commit", "-q", "-m", file)
		return git("rev-parse", "HEAD")
	}
	git("init", "-q")
	inputs := []string{"go.mod", "pkg/a"}
	ctx := context.Background()
	want := commit("pkg/a/a.go", "package a\n")
	for _, c := range []struct{ file, why string }{
		{"deploy/manifests/kubefence.yaml", "a release commit"},
		{"pkg/a/a_test.go", "a test"},
		{"pkg/a/testdata/x", "test data"},
		{"docs/x.md", "docs"},
	} {
		commit(c.file, "x\n")
		sc, err := sourceCommitOf(ctx, dir, inputs)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Revision != want || sc.Dirty || sc.Created.Unix() != 1767323045 {
			t.Errorf("after %s: %+v, want %s, clean, at the commit's time", c.why, sc, want)
		}
	}
	want = commit("go.mod", "module m\n")
	if sc, err := sourceCommitOf(ctx, dir, inputs); err != nil || sc.Revision != want {
		t.Errorf("after go.mod changed: %+v (%v), want %s", sc, err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "pkg/a/new.go"), []byte("package a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if sc, err := sourceCommitOf(ctx, dir, inputs); err != nil || !sc.Dirty || sc.Revision != want+"-dirty" {
		t.Errorf("with an uncommitted input: %+v (%v), want %s-dirty", sc, err, want)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "42")
	if sc, err := sourceCommitOf(ctx, dir, inputs); err != nil || sc.Created.Unix() != 42 {
		t.Errorf("SOURCE_DATE_EPOCH=42: created %v (%v)", sc.Created, err)
	}
}

// TestImageInputs: what the image is built from, in this repository.
func TestImageInputs(t *testing.T) {
	inputs, err := imageInputs(context.Background(), "go", repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"go.mod", "go.sum", "hack/images", "cmd/fence-controller", "deploy/image/config-init", "pkg/controller", "pkg/fenceagent/ipmi"} {
		if !slices.Contains(inputs, want) {
			t.Errorf("inputs %v lack %s", inputs, want)
		}
	}
	for _, not := range []string{"test/sim", "deploy/render", "hack/checkimports"} {
		if slices.Contains(inputs, not) {
			t.Errorf("inputs hold %s, which no binary of the image compiles", not)
		}
	}
}

func TestReleaseVersionAndChangelog(t *testing.T) {
	for v, want := range map[string]string{"v0.2.0": "0.2.0", "v1.0.0-rc.1": "1.0.0-rc.1", "0.2.0": "", "v0.2": "", "v0.2.0+build": "", "v01.2.3": ""} {
		got, err := ChartVersion(v)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("ChartVersion(%q) = %q, %v; want %q", v, got, err, want)
		}
	}
	log := filepath.Join(t.TempDir(), "CHANGELOG.md")
	if err := os.WriteFile(log, []byte("# Changelog\n\n## v0.2.0 - 2026-12-01\n\n- x\n\n## v0.1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for v, ok := range map[string]bool{"v0.2.0": true, "v0.1.0": true, "v0.1": false, "v0.3.0": false} {
		if err := CheckChangelog(log, v); (err == nil) != ok {
			t.Errorf("CheckChangelog(%s) = %v, want ok=%v", v, err, ok)
		}
	}
}
