// Package imagebuild builds kubefence's container image without a container engine,
// with go-containerregistry: one image, from scratch layers, that holds
// fence-controller, kubefence-config-init, fence-node-agent, every fence agent with its SHA256SUMS, and
// this machine's ipmitool with the libraries it loads. It also packs any directory as
// a one-layer image (the test harness's pause and busybox images) and serves an
// in-memory registry. hack/images is its command line.
package imagebuild

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's layout; the Dockerfile and the chart (pluginDir) use the same paths.
const (
	BinDir   = "/usr/local/bin"
	AgentDir = "/usr/libexec/kubefence/agents"
	// SumsFile lists the agents' SHA-256 in sha256sum's format.
	SumsFile = AgentDir + "/SHA256SUMS"
	// Entrypoint is the controller.
	Entrypoint = BinDir + "/fence-controller"
	// NonRoot is the user and group the image runs as, distroless's nonroot.
	NonRoot = 65532
	// Source is the org.opencontainers.image.source label.
	Source = "https://github.com/kubefence/kubefence"
	// PathEnv is the image's PATH, the same one the controller gives its agents.
	PathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Command is one kubefence binary: the package it is built from and its name in the image.
type Command struct {
	Pkg  string
	Name string
	Dir  string
}

// Commands are the binaries of the image, in the Dockerfile's order.
var Commands = []Command{
	{Pkg: "./cmd/fence-controller", Name: "fence-controller", Dir: BinDir},
	{Pkg: "./deploy/image/config-init", Name: "kubefence-config-init", Dir: BinDir},
	{Pkg: "./cmd/fence-node-agent", Name: "fence-node-agent", Dir: BinDir},
	{Pkg: "./cmd/fence-agent-ipmi", Name: "fence-agent-ipmi", Dir: AgentDir},
	{Pkg: "./cmd/fence-agent-cloud", Name: "fence-agent-cloud", Dir: AgentDir},
	{Pkg: "./cmd/fence-agent-iscsi", Name: "fence-agent-iscsi", Dir: AgentDir},
	{Pkg: "./cmd/fence-agent-exec", Name: "fence-agent-exec", Dir: AgentDir},
}

// Options say what goes into the kubefence image.
type Options struct {
	// BinDir holds one file per Commands entry, named by its Name.
	BinDir string
	// Version and Revision are the labels org.opencontainers.image.version and
	// .revision; Version is git describe's, like the binaries'.
	Version, Revision string
	// Created is the image's creation time and every file's modification time; the
	// zero value means the Unix epoch. The same inputs and Created give the same digest.
	Created time.Time
}

func (o Options) created() time.Time {
	if o.Created.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return o.Created.UTC().Truncate(time.Second)
}

// Layers returns the image's two layers as trees: the base (users, CA certificates,
// ipmitool and its libraries, their Debian metadata), which changes only with this
// machine's packages, and the kubefence binaries.
func Layers(o Options) (base, app *Tree, err error) {
	base, err = BaseTree(o.created())
	if err != nil {
		return nil, nil, err
	}
	app, err = AppTree(o.BinDir, o.created())
	if err != nil {
		return nil, nil, err
	}
	return base, app, nil
}

// BaseTree is what the image holds besides kubefence: a root filesystem like
// distroless's (passwd and group with nonroot 65532, nsswitch.conf, /tmp 1777, the CA
// bundle) plus this machine's ipmitool at /usr/bin/ipmitool with every library ldd
// lists and the loader, at their paths.
func BaseTree(mtime time.Time) (*Tree, error) {
	t := NewTree(mtime)
	files := []struct {
		path string
		perm os.FileMode
		data string
	}{
		{"/etc/passwd", 0o644, "root:x:0:0:root:/root:/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)},
		{"/etc/group", 0o644, "root:x:0:\nnobody:x:65534:\n" + fmt.Sprintf("nonroot:x:%d:\n", NonRoot)},
		// glibc's name lookups (ipmitool -H bmc.example): /etc/hosts, then DNS. Both
		// are built into glibc 2.34 and later, so no libnss_* is needed.
		{"/etc/nsswitch.conf", 0o644, "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n"},
	}
	for _, f := range files {
		if err := t.File(f.path, f.perm, []byte(f.data)); err != nil {
			return nil, err
		}
	}
	for _, d := range []struct {
		path     string
		perm     os.FileMode
		uid, gid int
	}{
		{"/tmp", os.ModeSticky | 0o777, 0, 0},
		{"/root", 0o700, 0, 0},
		{"/home/nonroot", 0o700, NonRoot, NonRoot},
		{"/var/run", 0o755, 0, 0},
	} {
		if err := t.Dir(d.path, d.perm, d.uid, d.gid); err != nil {
			return nil, err
		}
	}
	if err := t.HostFile(HostCACerts, HostCACerts, 0o644); err != nil {
		return nil, fmt.Errorf("CA certificates (apt-get install ca-certificates): %w", err)
	}
	// The Debian release the host files come from, which scanners read with status.d.
	if err := t.HostFile(HostOSRelease, HostOSRelease, 0o644); err != nil {
		return nil, err
	}
	host, err := ipmitoolFiles()
	if err != nil {
		return nil, err
	}
	for _, f := range host {
		perm := os.FileMode(0o644)
		if f == HostIpmitool || strings.Contains(path.Base(f), "ld-linux") {
			perm = 0o755
		}
		// Where ldd found it, with links resolved: /lib may be a link to usr/lib here,
		// and in the image it is a plain directory.
		if err := t.HostFile(f, f, perm); err != nil {
			return nil, err
		}
	}
	if _, err := addHostPackages(t, append(host, HostCACerts, HostOSRelease)); err != nil {
		return nil, err
	}
	return t, nil
}

// AppTree holds the kubefence binaries found in binDir and SHA256SUMS of the agents.
func AppTree(binDir string, mtime time.Time) (*Tree, error) {
	t := NewTree(mtime)
	var sums strings.Builder
	for _, c := range Commands {
		data, err := os.ReadFile(filepath.Join(binDir, c.Name))
		if err != nil {
			return nil, fmt.Errorf("kubefence binary: %w", err)
		}
		if err := t.File(path.Join(c.Dir, c.Name), 0o755, data); err != nil {
			return nil, err
		}
		if c.Dir == AgentDir {
			sum := sha256.Sum256(data)
			// sha256sum's format: "HASH  NAME", as `sha256sum -c` reads it.
			fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), c.Name)
		}
	}
	if err := t.File(SumsFile, 0o644, []byte(sums.String())); err != nil {
		return nil, err
	}
	return t, nil
}

// Layer is a tree as a gzip-compressed OCI layer. It is compressed once, here, with a
// gzip header that carries no name or time, so its digest depends only on the tree.
func Layer(t *Tree) (v1.Layer, error) {
	var compressed bytes.Buffer
	zw, err := gzip.NewWriterLevel(&compressed, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if err := t.WriteTar(zw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	data := compressed.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// ImageConfig is what an image runs and says about itself.
type ImageConfig struct {
	Entrypoint []string
	Cmd        []string
	User       string
	Env        []string
	Labels     map[string]string
	// History describes each layer, in order.
	History []string
}

// NewImage stacks the trees, in order, into a linux/amd64 OCI image created at created.
func NewImage(created time.Time, cfg ImageConfig, trees ...*Tree) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	t := v1.Time{Time: created}
	var adds []mutate.Addendum
	for i, tree := range trees {
		l, err := Layer(tree)
		if err != nil {
			return nil, err
		}
		h := v1.History{Created: t, CreatedBy: "hack/images"}
		if i < len(cfg.History) {
			h.CreatedBy = cfg.History[i]
		}
		adds = append(adds, mutate.Addendum{Layer: l, History: h, MediaType: types.OCILayer})
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = t
	env := cfg.Env
	if len(env) == 0 {
		env = []string{PathEnv}
	}
	cf.Config = v1.Config{
		Entrypoint: cfg.Entrypoint,
		Cmd:        cfg.Cmd,
		User:       cfg.User,
		Env:        env,
		Labels:     cfg.Labels,
		WorkingDir: "/",
	}
	return mutate.ConfigFile(img, cf)
}

// Build builds the kubefence image from o.
func Build(o Options) (v1.Image, error) {
	base, app, err := Layers(o)
	if err != nil {
		return nil, err
	}
	return NewImage(o.created(), KubefenceConfig(o), base, app)
}

// KubefenceConfig is the kubefence image's configuration: the controller as entrypoint,
// run as nonroot, with the OCI version, revision and source labels.
func KubefenceConfig(o Options) ImageConfig {
	return ImageConfig{
		Entrypoint: []string{Entrypoint},
		User:       fmt.Sprintf("%d:%d", NonRoot, NonRoot),
		Labels: map[string]string{
			"org.opencontainers.image.title":    "kubefence",
			"org.opencontainers.image.version":  o.Version,
			"org.opencontainers.image.revision": o.Revision,
			"org.opencontainers.image.source":   Source,
		},
		History: []string{
			"hack/images: base (passwd, group, CA certificates, ipmitool " + HostIpmitool + " with its libraries)",
			"hack/images: kubefence " + o.Version + " (" + BinDir + ", " + AgentDir + ")",
		},
	}
}
