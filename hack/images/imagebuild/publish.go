package imagebuild

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// emptyConfig is the OCI 1.1 empty descriptor's content, the config of an artifact.
var emptyConfig = []byte("{}")

// NewIndex puts images, one per architecture, into an OCI image index annotated with
// the release's version, revision, creation time and source.
func NewIndex(version, revision string, created time.Time, images map[string]v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, a := range Arches {
		img, ok := images[a.Name]
		if !ok {
			return nil, fmt.Errorf("image index: no %s image", a.Name)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: a.Name}}})
	}
	return mutate.Annotations(idx, map[string]string{
		"org.opencontainers.image.title":    ImageName,
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.created":  created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.source":   Source,
	}).(v1.ImageIndex), nil
}

// publish pushes the index of built by digest, then each platform image's SBOM as an OCI
// 1.1 referrer of that image, signs them when o.Signer is set, and tags the index last,
// so that a tag never names an index whose SBOMs or signatures are not there yet. It
// fills in rel's digests.
func publish(ctx context.Context, o ReleaseOptions, repo name.Repository, sc SourceCommit, built []platformImage, rel *Released) error {
	images := map[string]v1.Image{}
	for _, p := range built {
		images[p.arch.Name] = p.image
	}
	idx, err := NewIndex(o.Version, sc.Revision, sc.Created, images)
	if err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	rel.Digest = d.String()
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	if err := remote.WriteIndex(repo.Digest(d.String()), idx, ropts...); err != nil {
		return fmt.Errorf("push %s@%s: %w", repo, d, err)
	}
	for _, p := range built {
		ri, err := attachSBOM(ctx, o, repo, p, ropts)
		if err != nil {
			return err
		}
		rel.Images = append(rel.Images, ri)
	}
	if o.Signer != nil {
		if err := signRelease(ctx, o.Signer, o.Out, repo.String(), rel); err != nil {
			return err
		}
		fmt.Fprintf(o.Log, "signed %s@%s, its images and SBOMs, and attested its provenance\n", repo, d)
	} else {
		fmt.Fprintln(o.Log, "not signed: no COSIGN_KEY (docs/getting-started.md#releases)")
	}
	return tagIndex(repo, idx, rel.Tags, ropts, o.Log)
}

// tagIndex tags idx, already pushed by digest, with tags.
func tagIndex(repo name.Repository, idx v1.ImageIndex, tags []string, ropts []remote.Option, log io.Writer) error {
	for _, t := range tags {
		if err := remote.Tag(repo.Tag(t), idx, ropts...); err != nil {
			return fmt.Errorf("tag %s: %w", repo.Tag(t), err)
		}
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "pushed %s@%s, tagged %v\n", repo, d, tags)
	return nil
}

// attachSBOM writes the SBOM of p's image to o.Out and pushes it as an artifact whose
// subject is that image.
func attachSBOM(ctx context.Context, o ReleaseOptions, repo name.Repository, p platformImage, ropts []remote.Option) (ReleasedImage, error) {
	subject, err := descriptorOf(p.image)
	if err != nil {
		return ReleasedImage{}, err
	}
	in := p.sbom
	in.Digest, in.Repository = subject.Digest, repo.String()
	doc, err := SBOM(in)
	if err != nil {
		return ReleasedImage{}, err
	}
	file := "sbom-linux-" + p.arch.Name + ".spdx.json"
	if err := os.WriteFile(filepath.Join(o.Out, file), doc, 0o644); err != nil {
		return ReleasedImage{}, err
	}
	art, err := SBOMArtifact(subject, doc, file, in.Created)
	if err != nil {
		return ReleasedImage{}, err
	}
	h, err := pushArtifact(repo, art, doc, ropts)
	if err != nil {
		return ReleasedImage{}, fmt.Errorf("push the SBOM of %s: %w", subject.Digest, err)
	}
	s, err := Summarize(p.image)
	if err != nil {
		return ReleasedImage{}, err
	}
	return ReleasedImage{Platform: "linux/" + p.arch.Name, Digest: subject.Digest.String(), SBOM: h.String(),
		SBOMFile: file, Compressed: s.Compressed}, nil
}

// pushArtifact pushes an artifact's manifest art, with the empty config and its one layer
// doc, by digest.
func pushArtifact(repo name.Repository, art, doc []byte, ropts []remote.Option) (v1.Hash, error) {
	for _, blob := range [][]byte{emptyConfig, doc} {
		if err := remote.WriteLayer(repo, static.NewLayer(blob, types.OCILayer), ropts...); err != nil {
			return v1.Hash{}, err
		}
	}
	h, _, err := v1.SHA256(bytes.NewReader(art))
	if err != nil {
		return v1.Hash{}, err
	}
	return h, remote.Put(repo.Digest(h.String()), rawManifest(art), ropts...)
}

// SBOMArtifact is the manifest of an OCI 1.1 artifact that carries doc (an SPDX SBOM)
// about subject: artifactType application/spdx+json, the empty config, one layer.
func SBOMArtifact(subject v1.Descriptor, doc []byte, title string, created time.Time) ([]byte, error) {
	cfg, _, err := v1.SHA256(bytes.NewReader(emptyConfig))
	if err != nil {
		return nil, err
	}
	sum, size, err := v1.SHA256(bytes.NewReader(doc))
	if err != nil {
		return nil, err
	}
	m := v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: SBOMMediaType,
		Config: v1.Descriptor{MediaType: "application/vnd.oci.empty.v1+json", Size: int64(len(emptyConfig)), Digest: cfg, Data: emptyConfig},
		Layers: []v1.Descriptor{{MediaType: SBOMMediaType, Size: size, Digest: sum,
			Annotations: map[string]string{"org.opencontainers.image.title": title}}},
		Subject:     &v1.Descriptor{MediaType: subject.MediaType, Size: subject.Size, Digest: subject.Digest},
		Annotations: map[string]string{"org.opencontainers.image.created": created.UTC().Format(time.RFC3339)},
	}
	return json.Marshal(m)
}

// descriptorOf is img's manifest descriptor.
func descriptorOf(img v1.Image) (v1.Descriptor, error) {
	d, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Size: size, Digest: d}, nil
}

// rawManifest is a manifest's bytes for remote.Put.
type rawManifest []byte

func (r rawManifest) RawManifest() ([]byte, error) { return r, nil }

func (r rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
