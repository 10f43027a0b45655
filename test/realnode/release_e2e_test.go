package realnode

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/hack/images/imagebuild"
)

// releaseMirror is the image registry the release is installed with: docker.io, which
// the nodes resolve to the cluster's registry, stands for a user's own mirror of the
// release's registry. The digest is the release's either way.
const releaseMirror = "docker.io"

// installRelease installs kubefence as a user installs a release: make release (the
// chart's version, with a CHANGELOG entry) into the cluster's registry, then helm install
// of the released chart from the registry with only the image's registry set. Before the
// install it checks what the release published: each platform image's files and SBOM,
// the arm64 image's binaries run under qemu-aarch64-static, the signatures and the
// provenance with the docs' verify commands (and a tampered tag refused), and the files
// a release commit holds; after it, the controller's pods run the release's image by
// digest. It returns helm's output.
func installRelease(t *testing.T, ctx context.Context, c *Cluster, values ...string) (string, error) {
	t.Helper()
	r, err := c.MakeRelease(ctx, "v"+imageAppVersion(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("make release %s took %s: %s@%s, chart %s@%s", r.Version, r.Took.Round(time.Second), r.Image, r.Digest, r.Chart, r.ChartDigest)
	t.Run("released images", func(t *testing.T) { checkReleasedImages(t, ctx, r) })
	t.Run("verified as the docs say", func(t *testing.T) { verifyRelease(t, ctx, r, c.ReleaseRegistry()) })
	t.Run("release files", func(t *testing.T) { checkReleaseTree(t, r) })
	t.Run("kubectl fence archives", func(t *testing.T) { checkPluginArchives(t, r) })
	out, err := c.InstallRelease(ctx, r, releaseMirror, values...)
	if err != nil {
		return out, err
	}
	t.Logf("helm install %s --version %s --set image.registry=%s: %s", r.Chart, r.ChartVersion, releaseMirror, firstLines(out, 4))
	want := fmt.Sprintf("%s/%s:%s@%s", releaseMirror, r.Repository, r.ChartVersion, r.Digest)
	waitFor(t, ctx, "the controller's pods Running and Ready with "+want, func() (bool, error) {
		return controllerPodsReady(ctx, c, want)
	})
	return out, nil
}

// controllerPodsReady: every replica of the controller runs image, Running and Ready.
func controllerPodsReady(ctx context.Context, c *Cluster, image string) (bool, error) {
	pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=controller"})
	if err != nil {
		return false, err
	}
	if len(pods.Items) < 2 {
		return false, fmt.Errorf("%d controller pods, want the chart's 2", len(pods.Items))
	}
	for _, p := range pods.Items {
		if p.Spec.Containers[0].Image != image {
			return false, fmt.Errorf("pod %s runs %s, want %s", p.Name, p.Spec.Containers[0].Image, image)
		}
		ready := false
		for _, cond := range p.Status.Conditions {
			ready = ready || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
		}
		if p.Status.Phase != corev1.PodRunning || !ready {
			return false, fmt.Errorf("pod %s is %s, ready %v", p.Name, p.Status.Phase, ready)
		}
	}
	return true, nil
}

// checkReleasedImages pulls the release's index under both tags and, for each platform:
// every ELF file of the image is built for it, the kubefence binaries and ipmitool among
// them; its SBOM is attached and names the Debian packages and Go modules; and the arm64
// image's fence-controller --version and ipmitool -V run under qemu-aarch64-static.
func checkReleasedImages(t *testing.T, ctx context.Context, r *MadeRelease) {
	repo, err := name.NewRepository(r.Image, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	var idx v1.ImageIndex
	for _, tag := range r.Tags {
		if idx, err = remote.Index(repo.Tag(tag), remote.WithContext(ctx)); err != nil {
			t.Fatal(err)
		}
		if d, _ := idx.Digest(); d.String() != r.Digest {
			t.Fatalf("%s is %s, the release says %s", repo.Tag(tag), d, r.Digest)
		}
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range m.Manifests {
		a, err := imagebuild.ArchNamed(d.Platform.Architecture)
		if err != nil {
			t.Fatal(err)
		}
		platforms = append(platforms, d.Platform.OS+"/"+a.Name)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		root := t.TempDir()
		if err := extract(img, root); err != nil {
			t.Fatal(err)
		}
		checkELFs(t, a, root)
		checkSBOM(t, ctx, repo, d.Digest, r)
		if a.Name == "arm64" {
			runUnderQemu(t, ctx, root, r)
		}
	}
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("the index holds %v, want linux/amd64 and linux/arm64", platforms)
	}
}

// checkELFs: every ELF file under root is for a, and the kubefence binaries and
// ipmitool are ELF files.
func checkELFs(t *testing.T, a imagebuild.Arch, root string) {
	t.Helper()
	var elfs []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil || !imagebuild.IsELF(data) {
			return err
		}
		rel := "/" + filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator)))
		if _, err := a.CheckELF(rel, data); err != nil {
			t.Error(err)
		}
		elfs = append(elfs, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{imagebuild.Ipmitool}
	for _, c := range imagebuild.Commands {
		want = append(want, path.Join(c.Dir, c.Name))
	}
	for _, w := range want {
		if !slices.Contains(elfs, w) {
			t.Errorf("the %s image has no ELF file %s", a.Name, w)
		}
	}
	t.Logf("%s: %d ELF files, all for %s", a.Name, len(elfs), a.Machine)
}

// runUnderQemu runs the arm64 image's fence-controller --version and ipmitool -V under
// qemu-aarch64-static, with the image's root for the loader and libraries.
func runUnderQemu(t *testing.T, ctx context.Context, root string, r *MadeRelease) {
	t.Helper()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{path.Join(imagebuild.BinDir, "fence-controller"), "--version"}, r.Version},
		{[]string{imagebuild.Ipmitool, "-V"}, "ipmitool version 1.8.19"},
	} {
		cmd, err := imagebuild.QemuCommand(ctx, root, tc.args...)
		if err != nil {
			t.Fatalf("the arm64 image runs under %s: %v", imagebuild.Qemu, err)
		}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("arm64 %v under %s: %v: %s (want %q)", tc.args, imagebuild.Qemu, err, out, tc.want)
			continue
		}
		t.Logf("arm64 %s under %s: %s", strings.Join(tc.args, " "), imagebuild.Qemu, strings.TrimSpace(string(out)))
	}
}

// checkSBOM: the platform image digest has one referrer, the release's SPDX SBOM, which
// names ipmitool, libc6, the Go standard library and modules, and the binaries.
func checkSBOM(t *testing.T, ctx context.Context, repo name.Repository, digest v1.Hash, r *MadeRelease) {
	t.Helper()
	refs, err := remote.Referrers(repo.Digest(digest.String()), remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	m, err := refs.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("%s has %d referrers, want its SBOM", digest, len(m.Manifests))
	}
	art, err := remote.Get(repo.Digest(m.Manifests[0].Digest.String()), remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	var am v1.Manifest
	if err := json.Unmarshal(art.Manifest, &am); err != nil {
		t.Fatal(err)
	}
	if am.ArtifactType != imagebuild.SBOMMediaType || am.Subject == nil || am.Subject.Digest != digest || len(am.Layers) != 1 {
		t.Fatalf("the referrer of %s: %s", digest, art.Manifest)
	}
	l, err := remote.Layer(repo.Digest(am.Layers[0].Digest.String()), remote.WithContext(ctx))
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
	pkgs, err := imagebuild.SBOMPackages(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ipmitool@", "libc6@", "libssl3@", "stdlib@", "k8s.io/client-go@", "github.com/bmc-toolbox/bmclib/v2@",
		"fence-controller@" + r.Version, imagebuild.MainModule + "@" + r.Version} {
		if !slices.ContainsFunc(pkgs, func(p string) bool { return strings.HasPrefix(p, want) }) {
			t.Errorf("the SBOM of %s names no %s", digest, want)
		}
	}
}

// checkReleaseTree: the files a release commit holds name the release: the manifests
// pull its image by digest from its registry, the overlay overrides that image, the
// chart's versions are the release's.
func checkReleaseTree(t *testing.T, r *MadeRelease) {
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(r.Tree, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	image := fmt.Sprintf("%s:%s@%s", r.Image, r.ChartVersion, r.Digest)
	if kf := read("deploy/manifests/kubefence.yaml"); strings.Count(kf, "image: "+image+"\n") != 3 {
		t.Errorf("deploy/manifests/kubefence.yaml: want its three containers on %s", image)
	}
	if k := read("deploy/kustomize/kustomization.yaml"); !strings.Contains(k, "\n- name: "+r.Image+"\n") {
		t.Errorf("deploy/kustomize overrides another image than %s:\n%s", r.Image, k)
	}
	if v := read("deploy/release-values.yaml"); !strings.Contains(v, r.Digest) {
		t.Errorf("deploy/release-values.yaml:\n%s", v)
	}
	if ch := read("deploy/helm/kubefence/Chart.yaml"); !strings.Contains(ch, "\nversion: "+r.ChartVersion+"\n") ||
		!strings.Contains(ch, "\nappVersion: \""+r.ChartVersion+"\"\n") {
		t.Errorf("Chart.yaml:\n%s", ch)
	}
}

// extract writes img's root filesystem under root: directories, regular files with
// their modes, symbolic links.
func extract(img v1.Image, root string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(root, filepath.FromSlash(path.Clean("/"+h.Name)))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var data bytes.Buffer
			if _, err = io.Copy(&data, tr); err == nil {
				err = os.WriteFile(p, data.Bytes(), os.FileMode(h.Mode).Perm()|0o200)
			}
		}
		if err != nil {
			return err
		}
	}
}

// checkPluginArchives checks the release's `kubectl fence` archives: one for each of
// PluginPlatforms, each with the SHA-256 the checksums file gives it.
func checkPluginArchives(t *testing.T, r *MadeRelease) {
	dir := filepath.Join(r.Dir, "plugin")
	sums, err := os.ReadFile(filepath.Join(dir, "kubectl-fence_"+r.Version+"_checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(sums)), "\n")
	platforms := strings.Split(PluginPlatforms, ",")
	if len(lines) != len(platforms) {
		t.Fatalf("the checksums file lists %d archives, want one for each of %s:\n%s", len(lines), PluginPlatforms, sums)
	}
	for _, p := range platforms {
		name := "kubectl-fence_" + r.Version + "_" + strings.Replace(p, "/", "_", 1) + ".tar.gz"
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if want := hex.EncodeToString(sum[:]) + "  " + name; !slices.Contains(lines, want) {
			t.Errorf("the checksums file has no line %q:\n%s", want, sums)
		}
	}
}
