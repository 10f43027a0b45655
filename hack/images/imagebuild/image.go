// Package imagebuild builds kubefence's container image without a container engine,
// with go-containerregistry: one image, from scratch layers, that holds
// fence-controller, kubefence-config-init, fence-node-agent, every fence agent with its
// SHA256SUMS, and ipmitool with the libraries it loads, from Debian packages pinned in
// hack/images/debian.lock, for amd64 and arm64; a release puts both in one image index
// with an SBOM for each. It also packs any directory as a one-layer image (the test
// harness's pause and busybox images) and serves an in-memory registry. hack/images is
// its command line.
package imagebuild

import (
	"bytes"
	"compress/gzip"
	"context"
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

// The image's layout; the chart (pluginDir) uses the same paths.
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

// Commands are the binaries of the image, in the order of their layer.
var Commands = []Command{
	{Pkg: "./cmd/fence-controller", Name: "fence-controller", Dir: BinDir},
	{Pkg: "./deploy/image/config-init", Name: "kubefence-config-init", Dir: BinDir},
	{Pkg: "./cmd/fence-node-agent", Name: "fence-node-agent", Dir: BinDir},
	{Pkg: "./cmd/fence-agent-ipmi", Name: "fence-agent-ipmi", Dir: AgentDir},
	{Pkg: "./cmd/fence-agent-cloud", Name: "fence-agent-cloud", Dir: AgentDir},
	{Pkg: "./cmd/fence-agent-iscsi", Name: "fence-agent-iscsi", Dir: AgentDir},
	{Pkg: "./cmd/fence-agent-exec", Name: "fence-agent-exec", Dir: AgentDir},
}

// Options say what goes into the kubefence image of one architecture.
type Options struct {
	// BinDir holds one file per Commands entry, named by its Name, built for Arch.
	BinDir string
	// Arch is the image's architecture; the zero value means amd64.
	Arch Arch
	// Debs are the lock's packages for Arch, unpacked (LoadDebs).
	Debs []*Deb
	// Version and Revision are the labels org.opencontainers.image.version and
	// .revision; Version is git describe's (or the release's), like the binaries'.
	Version, Revision string
	// Created is the image's creation time and every file's modification time; the
	// zero value means the Unix epoch. The same inputs and Created give the same digest.
	Created time.Time
}

func (o Options) created() time.Time {
	if o.Created.IsZero() {
		return epoch
	}
	return o.Created.UTC().Truncate(time.Second)
}

func (o Options) arch() Arch {
	if o.Arch.Name == "" {
		return Arches[0]
	}
	return o.Arch
}

// Layers returns the image's two layers as trees: the base (users, CA certificates,
// ipmitool and its libraries, their Debian records), which changes only with the lock,
// and the kubefence binaries. Every ELF file of both must be built for the image's
// architecture.
func Layers(o Options) (base, app *Tree, err error) {
	base, err = BaseTree(o.arch(), o.Debs, o.created())
	if err != nil {
		return nil, nil, err
	}
	app, err = AppTree(o.BinDir, o.created())
	if err != nil {
		return nil, nil, err
	}
	for _, t := range []*Tree{base, app} {
		if err := CheckArch(t, o.arch()); err != nil {
			return nil, nil, err
		}
	}
	return base, app, nil
}

// CheckArch fails when a regular file of t is an ELF file for another machine than a's.
func CheckArch(t *Tree, a Arch) error {
	for _, p := range t.Paths() {
		if e := t.Get(p); e.Mode.IsRegular() && IsELF(e.Data) {
			if _, err := a.CheckELF(p, e.Data); err != nil {
				return fmt.Errorf("the %s image: %w", a.Name, err)
			}
		}
	}
	return nil
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
	return NewImageFor(Arches[0], created, cfg, trees...)
}

// NewImageFor stacks the trees, in order, into a linux OCI image of a, created at
// created.
func NewImageFor(a Arch, created time.Time, cfg ImageConfig, trees ...*Tree) (v1.Image, error) {
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
	cf.Architecture, cf.OS = a.Name, "linux"
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

// Build builds the kubefence image from o. Without o.Debs it reads the lock of the
// repository at src and fetches its packages into the repository's cache.
func Build(ctx context.Context, src string, o Options) (v1.Image, error) {
	if o.Debs == nil {
		var err error
		if o.Debs, err = LoadDebs(ctx, src, o.arch().Name, os.Stderr); err != nil {
			return nil, err
		}
	}
	base, app, err := Layers(o)
	if err != nil {
		return nil, err
	}
	return NewImageFor(o.arch(), o.created(), KubefenceConfig(o), base, app)
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
			"hack/images: base (passwd, group, CA certificates, ipmitool with its libraries, from " + LockFile + ")",
			"hack/images: kubefence " + o.Version + " (" + BinDir + ", " + AgentDir + ")",
		},
	}
}
