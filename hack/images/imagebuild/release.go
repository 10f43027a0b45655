package imagebuild

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ReleaseFile is what a release writes for the steps after it (the chart, the rendered
// manifests) and for people: the image index, its platform images and their SBOMs.
const ReleaseFile = "release.json"

// ReleaseOptions say what to release and where.
type ReleaseOptions struct {
	// Src is the repository's root; Go the go command ("go" when empty).
	Src, Go string
	// Version is the release's, vX.Y.Z.
	Version string
	// Registry is where the release goes: the image to Registry/kubefence, and the
	// chart (a later step) to Registry/charts/kubefence.
	Registry string
	// Insecure: the registry speaks plain HTTP.
	Insecure bool
	// AllowDirty releases uncommitted changes to what the image is built from, with a
	// revision that says so; without it they are refused.
	AllowDirty bool
	// Out receives ReleaseFile, ProvenanceFile and the SBOMs.
	Out string
	// Signer signs the index, its images and SBOMs and attests the provenance before the
	// index is tagged; nil: the release is not signed.
	Signer *Signer
	// Log receives progress.
	Log io.Writer
}

// Released is ReleaseFile's content.
type Released struct {
	Version      string `json:"version"`
	ChartVersion string `json:"chartVersion"`
	Revision     string `json:"revision"`
	Created      string `json:"created"`
	// Registry and Repository are the chart's image.registry and image.repository.
	Registry   string `json:"registry"`
	Repository string `json:"repository"`
	// Image is Registry/Repository; Digest the image index's.
	Image    string          `json:"image"`
	Digest   string          `json:"digest"`
	Tags     []string        `json:"tags"`
	Insecure bool            `json:"insecure,omitempty"`
	Images   []ReleasedImage `json:"images"`
	// Chart and ChartDigest are the chart's OCI repository (oci://...) and manifest
	// digest, which the chart's step (deploy/render release) adds.
	Chart       string `json:"chart,omitempty"`
	ChartDigest string `json:"chartDigest,omitempty"`
	// Signed: the index, its images and SBOMs carry cosign signatures and the index the
	// provenance attestation (ProvenanceFile).
	Signed bool `json:"signed,omitempty"`
}

// ReleasedImage is one platform image of the index and its SBOM's artifact.
type ReleasedImage struct {
	Platform string `json:"platform"`
	Digest   string `json:"digest"`
	SBOM     string `json:"sbom"`
	// SBOMFile is the SBOM, relative to the release's directory.
	SBOMFile string `json:"sbomFile"`
	// Compressed is what a pull of this platform downloads.
	Compressed int64 `json:"compressed"`
}

// ImageName is the image's name in a release's registry.
const ImageName = "kubefence"

// Release builds the multi-arch image of the source commit (ReleaseSource), pushes its
// index by digest, attaches an SBOM to each platform image, writes the provenance, signs
// all of it when o.Signer is set, tags the index with the version and the chart's
// appVersion, and writes ReleaseFile to o.Out.
func Release(ctx context.Context, o ReleaseOptions) (*Released, error) {
	started := time.Now()
	chartVersion, err := ChartVersion(o.Version)
	if err != nil {
		return nil, err
	}
	if err := CheckChangelog(filepath.Join(o.Src, ChangelogFile), o.Version); err != nil {
		return nil, err
	}
	goCmd := o.Go
	if goCmd == "" {
		goCmd = "go"
	}
	sc, err := ReleaseSource(ctx, goCmd, o.Src)
	if err != nil {
		return nil, err
	}
	if sc.Dirty && !o.AllowDirty {
		return nil, fmt.Errorf("uncommitted changes to what the image is built from (git status): commit them, or release them as %s with ALLOW_DIRTY=1", sc.Revision)
	}
	var opts []name.Option
	if o.Insecure {
		opts = append(opts, name.Insecure)
	}
	repo, err := name.NewRepository(o.Registry+"/"+ImageName, opts...)
	if err != nil {
		return nil, fmt.Errorf("REGISTRY %q (a registry and path, e.g. ghcr.io/kubefence): %w", o.Registry, err)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "releasing kubefence %s from %s (%s) to %s\n", o.Version, sc.Revision, sc.Created.Format(time.RFC3339), repo)
	prov, err := provenanceInput(ctx, goCmd, o.Src, sc, started)
	if err != nil {
		return nil, err
	}
	var built []platformImage
	for _, a := range Arches {
		p, err := buildPlatform(ctx, o, goCmd, a, sc)
		if err != nil {
			return nil, err
		}
		built = append(built, p)
	}
	rel := &Released{Version: o.Version, ChartVersion: chartVersion, Revision: sc.Revision,
		Created: sc.Created.Format(time.RFC3339), Registry: repo.RegistryStr(), Repository: repo.RepositoryStr(),
		Image: repo.String(), Tags: []string{o.Version, chartVersion}, Insecure: o.Insecure}
	p, err := NewProvenance(o, prov, time.Now())
	if err != nil {
		return nil, err
	}
	if _, err := WriteProvenance(o.Out, p); err != nil {
		return nil, err
	}
	if err := publish(ctx, o, repo, sc, built, rel); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(rel, "", "  ")
	if err != nil {
		return nil, err
	}
	return rel, os.WriteFile(filepath.Join(o.Out, ReleaseFile), append(data, '\n'), 0o644)
}

// platformImage is one architecture's image with what its SBOM describes.
type platformImage struct {
	arch  Arch
	image v1.Image
	sbom  SBOMInput
}

// buildPlatform builds the binaries for a (trimmed, stamped with the version and the
// source revision) and the image of a from them and the lock's packages.
func buildPlatform(ctx context.Context, o ReleaseOptions, goCmd string, a Arch, sc SourceCommit) (platformImage, error) {
	debs, err := LoadDebs(ctx, o.Src, a.Name, o.Log)
	if err != nil {
		return platformImage{}, err
	}
	bin := filepath.Join(o.Out, "bin", "linux-"+a.Name)
	if err := os.RemoveAll(bin); err != nil {
		return platformImage{}, err
	}
	start := time.Now()
	spec := BinarySpec{Go: goCmd, Src: o.Src, Out: bin, Version: o.Version, Revision: sc.Revision, Arch: a.Name, Trim: true, Log: o.Log}
	if err := spec.Build(ctx); err != nil {
		return platformImage{}, err
	}
	fmt.Fprintf(o.Log, "built the linux/%s binaries in %s\n", a.Name, time.Since(start).Round(time.Second))
	opts := Options{BinDir: bin, Arch: a, Debs: debs, Version: o.Version, Revision: sc.Revision, Created: sc.Created}
	base, app, err := Layers(opts)
	if err != nil {
		return platformImage{}, err
	}
	img, err := NewImageFor(a, opts.created(), KubefenceConfig(opts), base, app)
	if err != nil {
		return platformImage{}, err
	}
	return platformImage{arch: a, image: img, sbom: SBOMInput{Version: o.Version, Arch: a,
		Created: opts.created(), BinDir: bin, Debs: debs}}, nil
}
