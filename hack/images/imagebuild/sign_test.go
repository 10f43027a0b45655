package imagebuild

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestVerifyRelease signs a small release as make release does (an index of two images
// with an SBOM each, its provenance, the chart) in an in-process registry, with a key
// made by cosign generate-key-pair, and runs docs/getting-started.md's policy and verify
// commands as written with the cosign CLI: they accept the release, and refuse it when
// its tag is moved to an unsigned index, when its chart is changed, and when the tag
// names a signed release of another commit.
func TestVerifyRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://") + "/kubefence"
	s := testSigner(t, ctx)
	dir := filepath.Dir(s.Key)
	revision, other := strings.Repeat("a1", 20), strings.Repeat("b2", 20)
	signed := signSmallRelease(t, ctx, s, reg, revision)
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	v := DocVerifier{Cosign: s.Cosign, Dir: dir, Registry: reg, Version: "v0.1.0", Revision: revision}
	if err := v.WritePolicy(string(doc)); err != nil {
		t.Fatal(err)
	}
	script, err := v.Script(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := v.Run(ctx, script); err != nil {
		t.Fatalf("the docs' verify commands refuse the signed release: %v\n%s", err, out)
	}
	unsigned, err := random.Index(256, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	index, chart := reg+"/kubefence:v0.1.0", reg+"/charts/kubefence:0.1.0"
	verify := "cosign verify --key cosign.pub --insecure-ignore-tlog=true "
	attest := "cosign verify-attestation --key cosign.pub --insecure-ignore-tlog=true --type slsaprovenance1 --policy " + PolicyFile + " "
	for what, tc := range map[string]struct {
		change func(t *testing.T)
		refuse string // the command that must fail
	}{
		"the tag moved to an unsigned index": {func(t *testing.T) { pushAs(t, ctx, index, unsigned) }, verify + index},
		"a changed chart":                    {func(t *testing.T) { pushAs(t, ctx, chart, randomImage(t)) }, verify + chart},
		"a signed release of another commit": {func(t *testing.T) { signSmallRelease(t, ctx, s, reg, other) }, attest + index},
	} {
		t.Run(what, func(t *testing.T) {
			tc.change(t)
			defer func() {
				pushAs(t, ctx, index, signed.index)
				pushAs(t, ctx, chart, signed.chart)
			}()
			out, err := v.Run(ctx, script)
			if err == nil {
				t.Fatalf("the docs' verify commands accept %s:\n%s", what, out)
			}
			if failed := lastCommand(out); failed != tc.refuse {
				t.Errorf("the command that refused %s: %q, want %q\n%s", what, failed, tc.refuse, out)
			}
			t.Logf("refused: %s: %s", lastCommand(out), lastLine(out))
		})
	}
}

// signedRelease is what signSmallRelease pushed: the index and the chart's stand-in.
type signedRelease struct {
	index v1.ImageIndex
	chart v1.Image
}

// pushAs pushes an index (with its images) or an image as ref.
func pushAs(t *testing.T, ctx context.Context, ref string, to remote.Taggable) {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	switch to := to.(type) {
	case v1.ImageIndex:
		err = remote.WriteIndex(tag, to, remote.WithContext(ctx))
	case v1.Image:
		err = remote.Write(tag, to, remote.WithContext(ctx))
	default:
		t.Fatalf("push %T", to)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// signSmallRelease pushes and signs, as publish and SignChart do, a release of revision
// to reg: an index of two random images with an SBOM artifact each, tagged v0.1.0 after
// its signatures, and a random image at reg/charts/kubefence:0.1.0 standing for the chart.
func signSmallRelease(t *testing.T, ctx context.Context, s *Signer, reg, revision string) signedRelease {
	t.Helper()
	repo, err := name.NewRepository(reg + "/" + ImageName)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	images := map[string]v1.Image{}
	rel := &Released{Version: "v0.1.0", Tags: []string{"v0.1.0"}}
	for _, a := range Arches {
		images[a.Name] = randomImage(t)
	}
	idx, err := NewIndex("v0.1.0", revision, created, images)
	if err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	rel.Digest = d.String()
	ropts := []remote.Option{remote.WithContext(ctx)}
	if err := remote.WriteIndex(repo.Digest(rel.Digest), idx, ropts...); err != nil {
		t.Fatal(err)
	}
	for _, a := range Arches {
		subject, err := descriptorOf(images[a.Name])
		if err != nil {
			t.Fatal(err)
		}
		doc := []byte(`{"spdxVersion":"SPDX-2.3","name":"` + a.Name + `"}`)
		art, err := SBOMArtifact(subject, doc, "sbom-linux-"+a.Name+".spdx.json", created)
		if err != nil {
			t.Fatal(err)
		}
		h, err := pushArtifact(repo, art, doc, ropts)
		if err != nil {
			t.Fatal(err)
		}
		rel.Images = append(rel.Images, ReleasedImage{Platform: "linux/" + a.Name, Digest: subject.Digest.String(), SBOM: h.String()})
	}
	out := t.TempDir()
	o := ReleaseOptions{Src: repoRoot, Version: "v0.1.0", Registry: reg}
	p, err := NewProvenance(o, ProvenanceInput{Commit: revision, GoVersion: runtime.Version(), ImageRevision: revision, Started: created}, created)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WriteProvenance(out, p); err != nil {
		t.Fatal(err)
	}
	if err := signRelease(ctx, s, out, repo.String(), rel); err != nil {
		t.Fatal(err)
	}
	if err := tagIndex(repo, idx, rel.Tags, ropts, io.Discard); err != nil {
		t.Fatal(err)
	}
	r := signedRelease{index: idx, chart: randomImage(t)}
	chart, err := name.NewRepository(reg + "/charts/kubefence")
	if err != nil {
		t.Fatal(err)
	}
	cd, err := r.chart.Digest()
	if err != nil {
		t.Fatal(err)
	}
	// Pushed by digest, as make release's chart step does when it signs.
	if err := remote.Write(chart.Digest(cd.String()), r.chart, ropts...); err != nil {
		t.Fatal(err)
	}
	rel.Chart, rel.ChartDigest, rel.ChartVersion = "oci://"+chart.String(), cd.String(), "0.1.0"
	data, err := json.Marshal(rel)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, ReleaseFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := remote.Head(chart.Tag("0.1.0"), ropts...); err == nil && d.Digest == cd {
		t.Fatal("the chart is tagged before it is signed")
	}
	if err := SignChart(ctx, s, out); err != nil {
		t.Fatal(err)
	}
	return r
}

func randomImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// testSigner signs with a key pair that cosign generate-key-pair makes in a directory of
// its own (cosign.key, cosign.pub), with a random password.
func testSigner(t *testing.T, ctx context.Context) *Signer {
	t.Helper()
	cosign, dir := cosignCLI(t), t.TempDir()
	s := &Signer{Cosign: cosign, Key: filepath.Join(dir, "cosign.key"), Env: []string{"COSIGN_PASSWORD=" + randomHex(t)}, Log: io.Discard}
	keygen := exec.CommandContext(ctx, cosign, "generate-key-pair")
	keygen.Dir, keygen.Env = dir, append(os.Environ(), s.Env...)
	if out, err := keygen.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	return s
}

// cosignCLI is the cosign binary hack/deps.sh builds.
func cosignCLI(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(repoRoot, ".cache", "bin", "cosign"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the cosign CLI: %v (hack/deps.sh cosign builds it)", err)
	}
	return p
}

// lastCommand is the last command bash -x traced in out: the one that failed.
func lastCommand(out string) string {
	var last string
	for _, l := range strings.Split(out, "\n") {
		if c, ok := strings.CutPrefix(l, "+ "); ok {
			last = c
		}
	}
	return last
}
