package imagebuild

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

var (
	goBinOnce sync.Once
	goBin     []byte
	goBinErr  error
)

// goBinaries puts a real kubefence tool (hack/images, built once per run, static and
// trimmed as a release builds) under every command's name: a Go binary whose build info
// lists the modules it links, which is what an SBOM reads.
func goBinaries(t *testing.T) string {
	t.Helper()
	goBinOnce.Do(func() {
		out := filepath.Join(os.TempDir(), fmt.Sprintf("kubefence-sbom-test-%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./hack/images")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			goBinErr = fmt.Errorf("go build ./hack/images: %w: %s", err, b)
			return
		}
		defer os.Remove(out)
		goBin, goBinErr = os.ReadFile(out)
	})
	if goBinErr != nil {
		t.Fatal(goBinErr)
	}
	dir := t.TempDir()
	for _, c := range Commands {
		if err := os.WriteFile(filepath.Join(dir, c.Name), goBin, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestPublish pushes a release's index (images of stand-in binaries on the locked bases)
// to a registry with and without the OCI 1.1 referrers API, and reads back what a user
// and a scanner get: the index under both tags with one image per platform, and on each
// platform image one SPDX SBOM naming the Go modules and the Debian packages. A second
// publish of the same input gives the same digests.
func TestPublish(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sc := SourceCommit{Revision: "0123abcd", Created: created}
	sbomBins := goBinaries(t)
	var built []platformImage
	for _, a := range Arches {
		o := Options{BinDir: fakeBinaries(t), Arch: a, Debs: lockedDebs(t, a.Name), Version: "v0.1.0", Revision: sc.Revision, Created: created}
		base, app, err := Layers(o)
		if err != nil {
			t.Fatal(err)
		}
		img, err := NewImageFor(a, created, KubefenceConfig(o), base, app)
		if err != nil {
			t.Fatal(err)
		}
		built = append(built, platformImage{arch: a, image: img, sbom: SBOMInput{Version: "v0.1.0", Arch: a, Created: created, BinDir: sbomBins, Debs: o.Debs}})
	}
	for _, referrers := range []bool{true, false} {
		t.Run(fmt.Sprintf("referrers API %v", referrers), func(t *testing.T) {
			srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(referrers), registry.Logger(log.New(io.Discard, "", 0))))
			defer srv.Close()
			host := strings.TrimPrefix(srv.URL, "http://")
			repo, err := name.NewRepository(host+"/kubefence/"+ImageName, name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			var first string
			for i := range 2 {
				rel := &Released{Tags: []string{"v0.1.0", "0.1.0"}}
				o := ReleaseOptions{Version: "v0.1.0", Out: t.TempDir(), Log: io.Discard}
				if err := publish(context.Background(), o, repo, sc, built, rel); err != nil {
					t.Fatal(err)
				}
				if i == 1 && rel.Digest != first {
					t.Errorf("a second publish: index %s, the first %s", rel.Digest, first)
				}
				first = rel.Digest
				checkPublished(t, repo, rel)
			}
		})
	}
}

// checkPublished reads the release back from the registry as a user and a scanner do.
func checkPublished(t *testing.T, repo name.Repository, rel *Released) {
	t.Helper()
	for _, tag := range rel.Tags {
		idx, err := remote.Index(repo.Tag(tag))
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := idx.Digest(); d.String() != rel.Digest {
			t.Errorf("%s is %s, the release %s", tag, d, rel.Digest)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var platforms []string
		for _, d := range m.Manifests {
			platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
		}
		if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) || m.Annotations["org.opencontainers.image.version"] != "v0.1.0" {
			t.Errorf("%s: platforms %v, annotations %v", tag, platforms, m.Annotations)
		}
	}
	for _, ri := range rel.Images {
		refs, err := remote.Referrers(repo.Digest(ri.Digest))
		if err != nil {
			t.Fatal(err)
		}
		m, err := refs.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		// The artifact type of the listing is checked on the manifest itself below: the
		// test registry lists the config's media type instead.
		if len(m.Manifests) != 1 || m.Manifests[0].Digest.String() != ri.SBOM {
			t.Fatalf("referrers of %s %s: %+v, want the SBOM %s", ri.Platform, ri.Digest, m.Manifests, ri.SBOM)
		}
		doc := sbomOf(t, repo, m.Manifests[0])
		pkgs, err := SBOMPackages(doc)
		if err != nil {
			t.Fatal(err)
		}
		arch := strings.TrimPrefix(ri.Platform, "linux/")
		for _, want := range []string{"ipmitool@1.8.19-4+deb12u2", "libc6@", "ca-certificates@", MainModule + "@v0.1.0",
			"stdlib@" + strings.TrimPrefix(runtime.Version(), "go"), "github.com/google/go-containerregistry@v0.22.1", "fence-controller@v0.1.0"} {
			if !slices.ContainsFunc(pkgs, func(p string) bool { return strings.HasPrefix(p, want) }) {
				t.Errorf("the %s SBOM lacks %s: %v", arch, want, pkgs)
			}
		}
		if !strings.Contains(string(doc), "pkg:deb/debian/ipmitool@1.8.19-4%2Bdeb12u2?arch="+arch+"&distro=debian-12") {
			t.Errorf("the %s SBOM has no purl of the %s ipmitool", arch, arch)
		}
	}
}

// sbomOf fetches the SBOM an artifact descriptor names.
func sbomOf(t *testing.T, repo name.Repository, d v1.Descriptor) []byte {
	t.Helper()
	art, err := remote.Get(repo.Digest(d.Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(art.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != SBOMMediaType || m.Subject == nil || len(m.Layers) != 1 || m.Layers[0].MediaType != SBOMMediaType {
		t.Fatalf("SBOM artifact %s: %s", d.Digest, art.Manifest)
	}
	l, err := remote.Layer(repo.Digest(m.Layers[0].Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	doc, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}
