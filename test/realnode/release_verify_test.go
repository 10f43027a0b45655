package realnode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kubefence/kubefence/hack/images/imagebuild"
	"github.com/kubefence/kubefence/test/sim"
)

// verifyRelease runs docs/getting-started.md's verify commands as written, with the
// release's public key, registry, version and this checkout's commit for REVISION,
// against the cluster's registry: the signatures of the index and the chart and their
// provenance are accepted. Then the release's tag is moved to an unsigned index, and the
// same commands refuse it; the tag is put back.
func verifyRelease(t *testing.T, ctx context.Context, r *MadeRelease, registry string) {
	root, err := sim.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cosign, err := Cosign(root)
	if err != nil {
		t.Fatal(err)
	}
	if r.PublicKey == "" || !r.Signed {
		t.Fatalf("the release is not signed (public key %q, release.json signed: %v)", r.PublicKey, r.Signed)
	}
	head, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	v := imagebuild.DocVerifier{Cosign: cosign, Dir: t.TempDir(), Registry: registry, Version: r.Version, Revision: strings.TrimSpace(string(head))}
	pub, err := os.ReadFile(r.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v.Dir, "cosign.pub"), pub, 0o644); err != nil {
		t.Fatal(err)
	}
	doc := gettingStarted(t)
	if err := v.WritePolicy(doc); err != nil {
		t.Fatal(err)
	}
	script, err := v.Script(doc)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := v.Run(ctx, script)
	if err != nil {
		t.Fatalf("the docs' verify commands refuse the release: %v\n%s", err, out)
	}
	t.Logf("the docs' verify commands accept the release in %s:\n%s", time.Since(start).Round(time.Millisecond), script)

	tag, err := name.NewTag(r.Image+":"+r.Version, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := random.Index(256, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tag, unsigned, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	out, err = v.Run(ctx, script)
	signed, rerr := remote.Index(tag.Context().Digest(r.Digest), remote.WithContext(ctx))
	if rerr != nil {
		t.Fatal(rerr)
	}
	if rerr := remote.Tag(tag, signed, remote.WithContext(ctx)); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		t.Fatalf("the docs' verify commands accept %s moved to an unsigned index:\n%s", tag, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	t.Logf("%s moved to an unsigned index: refused (%v): %s", tag, err, lines[len(lines)-1])
}
