// Command images builds kubefence's container images without Docker, packs a directory
// as a one-layer test image, and serves an in-memory registry.
//
// A release (make release): the multi-arch image index (linux/amd64, linux/arm64) with an
// SPDX SBOM attached to each platform image and a SLSA provenance, signed with cosign when
// a key is given, pushed to REGISTRY/kubefence:
//
//	go run ./hack/images release -version v0.2.0 -registry ghcr.io/kubefence
//
// One architecture's image, from the repository root (make images):
//
//	go run ./hack/images -out bin/kubefence-image.tar        # docker-save tarball
//	go run ./hack/images -push registry.example/kubefence    # push, with docker login's credentials
//
// It builds the binaries (static, -trimpath, version stamped; -bin DIR takes prebuilt
// ones instead, named as in the image) and stacks two layers from scratch: a base with
// ipmitool, its libraries, the CA bundle and os-release from the Debian packages that
// hack/images/debian.lock pins (fetched into .cache/debian and checked), and the users;
// then the binaries. The image is tagged with the Helm chart's appVersion, the tag the
// chart pulls by default, and with git describe's version.
//
// The lock, regenerated on purpose from this machine's apt (make debian-lock):
//
//	go run ./hack/images lock
//
// A directory as a one-layer image (test images: a static pause, busybox):
//
//	go run ./hack/images -rootfs DIR -entrypoint /pause -push 10.77.0.1:5000/pause:3.10 -insecure
//
// An in-memory registry, until killed:
//
//	go run ./hack/images registry -addr 127.0.0.1:5000
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kubefence/kubefence/hack/images/imagebuild"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	sub, args := "", os.Args[1:]
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "":
		err = build(ctx, args)
	case "registry":
		err = serveRegistry(ctx, args)
	case "lock":
		err = lock(ctx, args)
	case "release":
		err = release(ctx, args)
	case "sign-chart":
		err = signChart(ctx, args)
	default:
		err = fmt.Errorf("unknown command %q\n%s", sub, usage)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

const usage = `Usage:
  go run ./hack/images release -version vX.Y.Z -registry REGISTRY [-insecure] [-out DIR] [-key KEY [-tlog]]
      the release's multi-arch image index, SBOMs and provenance, pushed to
      REGISTRY/kubefence, signed with cosign when -key is set
  go run ./hack/images sign-chart -release DIR -key KEY [-tlog] [-insecure]
      sign the chart that release.json in DIR names and attest its provenance
  go run ./hack/images [-arch amd64|arm64] [-out FILE] [-push REPO [-insecure]] [-bin DIR] [-dir DIR]
      the kubefence image, tagged with the chart's appVersion and git describe's version
  go run ./hack/images lock
      regenerate hack/images/debian.lock from this machine's apt
  go run ./hack/images -rootfs DIR [-entrypoint PATH] (-push REF [-insecure] | -out FILE -ref REF)
      DIR as a one-layer image
  go run ./hack/images registry [-addr HOST:PORT] [-quiet]
      an in-memory registry until killed
`

func serveRegistry(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("images registry", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:5000", "address to listen on (HOST:PORT; port 0 picks a free one)")
	quiet := fs.Bool("quiet", false, "do not log each request to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Printf("registry listening on %s\n", l.Addr())
	var logw io.Writer = os.Stderr
	if *quiet {
		logw = nil
	}
	return imagebuild.ServeRegistry(ctx, l, logw)
}

type flags struct {
	src, goCmd, chart, repo, out, push, bin, dir string
	version, revision, arch                      string
	insecure                                     bool
	rootfs, entrypoint, cmd, ref, user           string
}

func build(ctx context.Context, args []string) error {
	var f flags
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	fs.StringVar(&f.src, "src", ".", "root of the kubefence repository")
	fs.StringVar(&f.goCmd, "go", "go", "go command that builds the binaries")
	fs.StringVar(&f.chart, "chart", imagebuild.ChartFile, "Chart.yaml whose appVersion is a tag (relative to -src)")
	fs.StringVar(&f.repo, "repo", "kubefence/kubefence", "repository the tags of -out name; -push sets it too")
	fs.StringVar(&f.out, "out", "", "write a docker-save tarball (docker load, ctr images import) with every tag to `FILE`")
	fs.StringVar(&f.push, "push", "", "push to `REPO` (kubefence image) or REF (with -rootfs), credentials from docker login's config")
	fs.BoolVar(&f.insecure, "insecure", false, "the registry of -push speaks plain HTTP")
	fs.StringVar(&f.bin, "bin", "", "take the kubefence binaries from `DIR` (fence-controller, kubefence-config-init, fence-node-agent, fence-agent-*) instead of building them; their stamped version stays theirs")
	fs.StringVar(&f.dir, "dir", "", "also write the image's root filesystem into `DIR` (e.g. to chroot into it)")
	fs.StringVar(&f.version, "version", "", "version label and tag; default: git describe --tags --always --dirty")
	fs.StringVar(&f.arch, "arch", "amd64", "the image's architecture: amd64 or arm64")
	fs.StringVar(&f.revision, "revision", "", "revision label; default: git rev-parse HEAD")
	fs.StringVar(&f.rootfs, "rootfs", "", "pack `DIR` as a one-layer image instead of building kubefence's")
	fs.StringVar(&f.entrypoint, "entrypoint", "", "with -rootfs: the entrypoint, a path or a JSON array")
	fs.StringVar(&f.cmd, "cmd", "", "with -rootfs: the command, a word or a JSON array")
	fs.StringVar(&f.user, "user", "", "with -rootfs: the user to run as (default root)")
	fs.StringVar(&f.ref, "ref", "", "with -rootfs and -out without -push: the reference the tarball names")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var opts []name.Option
	if f.insecure {
		opts = append(opts, name.Insecure)
	}
	if f.rootfs != "" {
		return buildRootfs(ctx, f, opts)
	}
	return buildKubefence(ctx, f, opts)
}

func buildKubefence(ctx context.Context, f flags, opts []name.Option) error {
	version, revision, created, gitErr := imagebuild.Git(f.src)
	if f.version != "" {
		version = f.version
	}
	if f.revision != "" {
		revision = f.revision
	}
	if gitErr != nil {
		if version == "" || revision == "" {
			return fmt.Errorf("version from git (or set -version and -revision): %w", gitErr)
		}
		// Without the commit's time every file has the Unix epoch's.
		fmt.Fprintf(os.Stderr, "images: %v; files dated at the Unix epoch\n", gitErr)
	}
	tags, err := tagsFor(f, version, opts)
	if err != nil {
		return err
	}
	arch, err := imagebuild.ArchNamed(f.arch)
	if err != nil {
		return err
	}
	debs, err := imagebuild.LoadDebs(ctx, f.src, arch.Name, os.Stderr)
	if err != nil {
		return err
	}
	bin := f.bin
	if bin == "" {
		tmp, err := os.MkdirTemp("", "kubefence-images-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		spec := imagebuild.BinarySpec{Go: f.goCmd, Src: f.src, Out: tmp, Version: version, Revision: revision, Arch: arch.Name, Trim: true, Log: os.Stderr}
		if err := buildBinaries(ctx, spec); err != nil {
			return err
		}
		bin = tmp
	}
	o := imagebuild.Options{BinDir: bin, Arch: arch, Debs: debs, Version: version, Revision: revision, Created: created}
	base, app, err := imagebuild.Layers(o)
	if err != nil {
		return err
	}
	if f.dir != "" {
		for _, t := range []*imagebuild.Tree{base, app} {
			if err := t.WriteDir(f.dir); err != nil {
				return fmt.Errorf("write root filesystem: %w", err)
			}
		}
		fmt.Fprintf(os.Stderr, "root filesystem written to %s\n", f.dir)
	}
	img, err := imagebuild.NewImageFor(arch, created, imagebuild.KubefenceConfig(o), base, app)
	if err != nil {
		return err
	}
	return emit(ctx, img, tags, f)
}

// buildBinaries builds the image's binaries as spec says and tells how long it took.
func buildBinaries(ctx context.Context, spec imagebuild.BinarySpec) error {
	fmt.Fprintf(os.Stderr, "building kubefence %s (%s) for linux/%s\n", spec.Version, spec.Revision, spec.Arch)
	start := time.Now()
	if err := spec.Build(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "built the binaries in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// tagsFor are the kubefence image's tags: the chart's appVersion and version.
func tagsFor(f flags, version string, opts []name.Option) ([]name.Tag, error) {
	chart := f.chart
	if !filepath.IsAbs(chart) {
		chart = filepath.Join(f.src, chart)
	}
	appVersion, err := imagebuild.ChartAppVersion(chart)
	if err != nil {
		return nil, fmt.Errorf("chart appVersion: %w", err)
	}
	repo := f.repo
	if f.push != "" {
		repo = f.push
	}
	return imagebuild.Tags(repo, []string{appVersion, version}, opts...)
}

func buildRootfs(ctx context.Context, f flags, opts []name.Option) error {
	ref := f.push
	if ref == "" {
		ref = f.ref
	}
	if ref == "" {
		return errors.New("-rootfs needs -push REF, or -out FILE with -ref REF")
	}
	tag, err := name.NewTag(ref, opts...)
	if err != nil {
		return fmt.Errorf("reference %q: %w", ref, err)
	}
	entrypoint, err := words(f.entrypoint)
	if err != nil {
		return fmt.Errorf("-entrypoint: %w", err)
	}
	cmd, err := words(f.cmd)
	if err != nil {
		return fmt.Errorf("-cmd: %w", err)
	}
	// The Unix epoch: the image depends on the directory alone.
	created := time.Unix(0, 0).UTC()
	t, err := imagebuild.TreeFromDir(f.rootfs, created)
	if err != nil {
		return err
	}
	img, err := imagebuild.NewImage(created, imagebuild.ImageConfig{
		Entrypoint: entrypoint, Cmd: cmd, User: f.user,
		History: []string{"hack/images -rootfs " + filepath.Base(f.rootfs)},
	}, t)
	if err != nil {
		return err
	}
	return emit(ctx, img, []name.Tag{tag}, f)
}

// words reads a JSON array of strings, or one word.
func words(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if strings.HasPrefix(s, "[") {
		var out []string
		err := json.Unmarshal([]byte(s), &out)
		return out, err
	}
	return []string{s}, nil
}

// emit writes and pushes img as f asks and prints each reference with the image's
// digest and sizes.
func emit(ctx context.Context, img v1.Image, tags []name.Tag, f flags) error {
	s, err := imagebuild.Summarize(img)
	if err != nil {
		return err
	}
	if f.out != "" {
		if err := os.MkdirAll(filepath.Dir(f.out), 0o755); err != nil {
			return err
		}
		if err := imagebuild.WriteTarball(f.out, img, tags); err != nil {
			return fmt.Errorf("write %s: %w", f.out, err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", f.out)
	}
	if f.push != "" {
		if err := imagebuild.Push(ctx, img, tags); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "pushed to %s\n", tags[0].Context())
	}
	for _, t := range tags {
		fmt.Printf("%s@%s compressed %s, uncompressed %s, %d layers\n",
			t, s.Digest, imagebuild.MB(s.Compressed), imagebuild.MB(s.Uncompressed), s.Layers)
	}
	return nil
}
