package imagebuild

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// repoRoot is the repository root, from this package's directory.
const repoRoot = "../../.."

// fakeBinaries writes one small file per Commands entry, each with its own content.
func fakeBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, c := range Commands {
		if err := os.WriteFile(filepath.Join(dir, c.Name), []byte("#!fake "+c.Name+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// file is one entry of an image's flattened root filesystem.
type file struct {
	hdr  *tar.Header
	data []byte
}

// flatten reads img's root filesystem, keyed by absolute path.
func flatten(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[path.Clean("/"+h.Name)] = file{hdr: h, data: data}
	}
}

// TestKubefenceImage builds the image from stand-in binaries in memory and checks
// what a pod gets: the layout, SHA256SUMS, the user, the entrypoint, the labels, the
// chart's tag, and the same digest from a second build.
func TestKubefenceImage(t *testing.T) {
	bin := fakeBinaries(t)
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o := Options{BinDir: bin, Version: "v0.1.0-3-gabcdef0", Revision: "abcdef0123", Created: created, Debs: lockedDebs(t, "amd64")}
	img, err := Build(context.Background(), repoRoot, o)
	if err != nil {
		t.Fatal(err)
	}
	files := flatten(t, img)

	// The kubefence binaries, root-owned and executable, as built.
	for _, c := range Commands {
		p := path.Join(c.Dir, c.Name)
		f, ok := files[p]
		if !ok {
			t.Errorf("%s missing", p)
			continue
		}
		if f.hdr.Mode&0o777 != 0o755 || f.hdr.Uid != 0 || f.hdr.Gid != 0 || !f.hdr.ModTime.Equal(created) {
			t.Errorf("%s: mode %o owner %d:%d mtime %s, want 0755 0:0 %s", p, f.hdr.Mode, f.hdr.Uid, f.hdr.Gid, f.hdr.ModTime, created)
		}
		if want := "#!fake " + c.Name + "\n"; string(f.data) != want {
			t.Errorf("%s holds %q, want %q", p, f.data, want)
		}
	}
	for _, p := range []string{"/usr/local/bin/fence-controller", "/usr/local/bin/kubefence-config-init", "/usr/local/bin/fence-node-agent",
		"/usr/libexec/kubefence/agents/fence-agent-ipmi", "/usr/libexec/kubefence/agents/fence-agent-cloud",
		"/usr/libexec/kubefence/agents/fence-agent-iscsi", "/usr/libexec/kubefence/agents/fence-agent-exec"} {
		if _, ok := files[p]; !ok {
			t.Errorf("%s missing (the chart expects it)", p)
		}
	}

	// SHA256SUMS: one line per agent, in sha256sum's format, matching the files.
	sums := strings.Split(strings.TrimSuffix(string(files[SumsFile].data), "\n"), "\n")
	var agents []string
	for _, line := range sums {
		sum, agent, ok := strings.Cut(line, "  ")
		if !ok {
			t.Errorf("SHA256SUMS line %q is not HASH  NAME", line)
			continue
		}
		agents = append(agents, agent)
		h := sha256.Sum256(files[path.Join(AgentDir, agent)].data)
		if hex.EncodeToString(h[:]) != sum {
			t.Errorf("SHA256SUMS: %s %s, but the file's is %x", agent, sum, h)
		}
	}
	if want := []string{"fence-agent-ipmi", "fence-agent-cloud", "fence-agent-iscsi", "fence-agent-exec"}; !slices.Equal(agents, want) {
		t.Errorf("SHA256SUMS lists %q, want %q", agents, want)
	}

	// The base: users, /tmp, CA bundle, ipmitool with its libraries and their packages.
	if p := string(files["/etc/passwd"].data); !strings.Contains(p, "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd lacks nonroot 65532:\n%s", p)
	}
	if g := string(files["/etc/group"].data); !strings.Contains(g, "nonroot:x:65532:") {
		t.Errorf("/etc/group lacks nonroot 65532:\n%s", g)
	}
	if h := files["/tmp"].hdr; h == nil || h.Typeflag != tar.TypeDir || h.Mode&0o7777 != 0o1777 {
		t.Errorf("/tmp: %+v, want a directory with mode 1777", h)
	}
	if h := files["/home/nonroot"].hdr; h == nil || h.Uid != NonRoot || h.Gid != NonRoot {
		t.Errorf("/home/nonroot: %+v, want owned by 65532", h)
	}
	checkBase(t, Arches[0], o.Debs, files)
	if s := string(files["/var/lib/dpkg/status.d/ipmitool"].data); !strings.HasPrefix(s, "Package: ipmitool\n") {
		t.Errorf("status.d/ipmitool starts %.40q", s)
	}

	// The configuration.
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/fence-controller"}) {
		t.Errorf("entrypoint %q", cf.Config.Entrypoint)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cf.Config.User)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || !cf.Created.Equal(created) {
		t.Errorf("platform %s/%s created %s", cf.OS, cf.Architecture, cf.Created)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source":   Source,
	}
	for k, v := range wantLabels {
		if cf.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], v)
		}
	}
	if mt, err := img.MediaType(); err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("media type %s (%v), want an OCI manifest", mt, err)
	}

	// The same inputs, the same digest.
	again, err := Build(context.Background(), repoRoot, o)
	if err != nil {
		t.Fatal(err)
	}
	d1, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := again.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Errorf("two builds of the same inputs: %s and %s", d1, d2)
	}

	// The tags: the one the chart pulls by default, and the version. The tarball that
	// `make images` writes names both.
	appVersion, err := ChartAppVersion(filepath.Join(repoRoot, ChartFile))
	if err != nil {
		t.Fatal(err)
	}
	pulled := chartDefaultImage(t)
	tags, err := Tags("kubefence/kubefence", []string{appVersion, o.Version})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "kubefence-image.tar")
	if err := WriteTarball(out, img, tags); err != nil {
		t.Fatal(err)
	}
	repoTags := tarballTags(t, out)
	for _, want := range []string{pulled, "kubefence/kubefence:" + o.Version} {
		if !slices.Contains(repoTags, want) {
			t.Errorf("the tarball names %q, not %q", repoTags, want)
		}
	}
}

// chartDefaultImage is the image the chart pulls with its default values:
// image.repository, and image.tag or else the chart's appVersion.
func chartDefaultImage(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy/helm/kubefence/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Image struct{ Repository, Tag string }
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	tag := values.Image.Tag
	if tag == "" {
		if tag, err = ChartAppVersion(filepath.Join(repoRoot, ChartFile)); err != nil {
			t.Fatal(err)
		}
	}
	return values.Image.Repository + ":" + tag
}

// tarballTags reads the RepoTags of a docker-save tarball's manifest.json.
func tarballTags(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("manifest.json in %s: %v", file, err)
		}
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&m); err != nil {
			t.Fatal(err)
		}
		var tags []string
		for _, e := range m {
			tags = append(tags, e.RepoTags...)
		}
		return tags
	}
}

func TestTagsRefuseBadNames(t *testing.T) {
	if _, err := Tags("kubefence/kubefence", []string{"v1+dirty"}); err == nil {
		t.Error("tag with + accepted")
	}
	if _, err := Tags("Kube Fence", []string{"v1"}); err == nil {
		t.Error("repository with a space accepted")
	}
	tags, err := Tags("reg.example:5000/kubefence", []string{"0.1.0", "0.1.0", "v0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tag := range tags {
		got = append(got, tag.String())
	}
	if want := []string{"reg.example:5000/kubefence:0.1.0", "reg.example:5000/kubefence:v0.1.0"}; !slices.Equal(got, want) {
		t.Errorf("tags %q, want %q", got, want)
	}
}

// TestRootfsImageThroughRegistry packs a directory as a one-layer image, pushes it to
// the in-memory registry that `hack/images registry` serves and pulls it back, as the
// test harness does with its pause and busybox images.
func TestRootfsImageThroughRegistry(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pause"), []byte("\x7fELF stand-in"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/pause", filepath.Join(dir, "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	tree, err := TreeFromDir(dir, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	img, err := NewImage(time.Unix(0, 0), ImageConfig{Entrypoint: []string{"/pause"}}, tree)
	if err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeRegistry(ctx, l, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("registry: %v", err)
		}
	})

	tag, err := name.NewTag(fmt.Sprintf("%s/test/pause:3.10", l.Addr()), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := Push(ctx, img, []name.Tag{tag}); err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(tag, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pulled.Digest(); err != nil || got != want {
		t.Errorf("pulled digest %s (%v), pushed %s", got, err, want)
	}
	cf, err := pulled.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/pause"}) || cf.Architecture != "amd64" {
		t.Errorf("config %+v", cf.Config)
	}
	files := flatten(t, pulled)
	if f := files["/pause"]; f.hdr == nil || f.hdr.Mode&0o777 != 0o755 || string(f.data) != "\x7fELF stand-in" {
		t.Errorf("/pause: %+v", f.hdr)
	}
	if f := files["/bin/sh"]; f.hdr == nil || f.hdr.Typeflag != tar.TypeSymlink || f.hdr.Linkname != "/pause" {
		t.Errorf("/bin/sh: %+v, want a link to /pause", f.hdr)
	}
	if f := files["/tmp"]; f.hdr == nil || f.hdr.Mode&0o7777 != 0o1777 {
		t.Errorf("/tmp: %+v, want mode 1777", f.hdr)
	}
}
