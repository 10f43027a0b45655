package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kubefence/kubefence/hack/images/imagebuild"
)

// release builds and pushes a release's image index with its SBOMs (make release, whose
// next step packages the chart in deploy/render).
func release(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("images release", flag.ContinueOnError)
	var o imagebuild.ReleaseOptions
	fs.StringVar(&o.Src, "src", ".", "root of the kubefence repository")
	fs.StringVar(&o.Go, "go", "go", "go command that builds the binaries")
	fs.StringVar(&o.Version, "version", "", "the release, vX.Y.Z (CHANGELOG.md needs its section)")
	fs.StringVar(&o.Registry, "registry", "", "registry and path the release goes to (`REGISTRY`/kubefence), e.g. ghcr.io/kubefence")
	fs.BoolVar(&o.Insecure, "insecure", false, "the registry speaks plain HTTP")
	fs.BoolVar(&o.AllowDirty, "allow-dirty", false, "release uncommitted changes (the revision says -dirty)")
	fs.StringVar(&o.Out, "out", "", "directory for release.json, provenance.json and the SBOMs (default bin/release/VERSION)")
	sf := signFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.Version == "" || o.Registry == "" {
		return errors.New("release: set -version (VERSION=vX.Y.Z) and -registry (REGISTRY=host/path)")
	}
	if o.Out == "" {
		o.Out = filepath.Join(o.Src, "bin", "release", o.Version)
	}
	o.Log = os.Stderr
	o.Signer = sf.signer(o.Insecure)
	start := time.Now()
	rel, err := imagebuild.Release(ctx, o)
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s\n", rel.Image, rel.Digest)
	for _, i := range rel.Images {
		fmt.Printf("  %s %s, SBOM %s, compressed %s\n", i.Platform, i.Digest, i.SBOM, imagebuild.MB(i.Compressed))
	}
	fmt.Fprintf(os.Stderr, "image index released in %s; wrote %s\n", time.Since(start).Round(time.Second), filepath.Join(o.Out, imagebuild.ReleaseFile))
	return nil
}

// signing is how a release is signed: make release's COSIGN_KEY, COSIGN_TLOG, COSIGN.
type signing struct {
	cosign, key *string
	tlog        *bool
}

func signFlags(fs *flag.FlagSet) signing {
	return signing{
		cosign: fs.String("cosign", filepath.Join(".cache", "bin", "cosign"), "the cosign CLI (hack/deps.sh cosign builds it)"),
		key:    fs.String("key", "", "sign with this cosign key: a key file (password from COSIGN_PASSWORD), env://VAR or a KMS URI; empty: unsigned"),
		tlog:   fs.Bool("tlog", false, "upload the signatures to the Rekor transparency log"),
	}
}

// signer is the Signer the flags ask for, nil without a key.
func (s signing) signer(insecure bool) *imagebuild.Signer {
	if *s.key == "" {
		return nil
	}
	return &imagebuild.Signer{Cosign: *s.cosign, Key: *s.key, Tlog: *s.tlog, Insecure: insecure, Log: os.Stderr}
}

// signChart signs the chart of a release, attests its provenance and tags it (make
// release's last step, after deploy/render pushed the chart by digest).
func signChart(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("images sign-chart", flag.ContinueOnError)
	dir := fs.String("release", "", "the release's directory (release.json, provenance.json)")
	insecure := fs.Bool("insecure", false, "the registry speaks plain HTTP")
	sf := signFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	s := sf.signer(*insecure)
	if *dir == "" || s == nil {
		return errors.New("sign-chart: set -release DIR and -key KEY")
	}
	if err := imagebuild.SignChart(ctx, s, *dir); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "signed the chart of %s, attested its provenance, tagged it\n", *dir)
	return nil
}

// lock regenerates the Debian lock from this machine's apt (make debian-lock).
func lock(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("images lock", flag.ContinueOnError)
	src := fs.String("src", ".", "root of the kubefence repository")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f := imagebuild.Fetcher{Dir: filepath.Join(*src, imagebuild.DebianCacheDir), Log: os.Stderr}
	l, err := imagebuild.GenerateLock(ctx, imagebuild.Apt(), f, os.Stderr)
	if err != nil {
		return err
	}
	// The image must build from what was locked: every library found, every package used.
	for _, a := range imagebuild.Arches {
		var debs []*imagebuild.Deb
		for _, p := range l.For(a.Name) {
			data, err := f.Fetch(ctx, p)
			if err != nil {
				return err
			}
			d, err := imagebuild.ReadDeb(p, data)
			if err != nil {
				return err
			}
			debs = append(debs, d)
		}
		if _, err := imagebuild.BaseTree(a, debs, time.Unix(0, 0)); err != nil {
			return fmt.Errorf("the %s image from the new lock: %w", a.Name, err)
		}
	}
	file := filepath.Join(*src, imagebuild.LockFile)
	if err := imagebuild.WriteLock(file, l); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s: %d packages\n", file, len(l.Packages))
	return nil
}
