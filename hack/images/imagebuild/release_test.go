package imagebuild

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// TestReleaseFromTwoClones releases this repository's HEAD from two clones at different
// paths, as two maintainers' machines would, signed, into a registry: the image index and
// every platform image have the same digest both times (the signatures differ).
func TestReleaseFromTwoClones(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://") + "/kubefence"
	s := testSigner(t, ctx)
	var rels []*Released
	for i, path := range []string{"a/src", "elsewhere/b/kubefence"} {
		src := filepath.Join(t.TempDir(), path)
		if out, err := exec.CommandContext(ctx, "git", "clone", "-q", "--shared", root, src).CombinedOutput(); err != nil {
			t.Fatalf("git clone: %v: %s", err, out)
		}
		// The Debian packages the image is built from, fetched once.
		if err := os.MkdirAll(filepath.Join(root, ".cache"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(root, ".cache"), filepath.Join(src, ".cache")); err != nil {
			t.Fatal(err)
		}
		o := ReleaseOptions{Src: src, Version: "v0.1.0", Registry: reg, Insecure: true, Out: filepath.Join(src, "bin", "release"), Signer: s, Log: io.Discard}
		start := time.Now()
		rel, err := Release(ctx, o)
		if err != nil {
			t.Fatalf("release from %s: %v", src, err)
		}
		t.Logf("release %d from %s in %s: %s@%s", i+1, src, time.Since(start).Round(time.Second), rel.Image, rel.Digest)
		if !rel.Signed {
			t.Errorf("release from %s is not signed", src)
		}
		rels = append(rels, rel)
	}
	a, b := rels[0], rels[1]
	if a.Digest != b.Digest || a.Revision != b.Revision || len(a.Images) != len(b.Images) {
		t.Fatalf("two clones: index %s and %s, revision %s and %s", a.Digest, b.Digest, a.Revision, b.Revision)
	}
	for i := range a.Images {
		if a.Images[i] != b.Images[i] {
			t.Errorf("two clones: %+v and %+v", a.Images[i], b.Images[i])
		}
	}
}
