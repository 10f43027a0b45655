package imagebuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ProvenanceFile is the release's SLSA v1 provenance predicate, beside ReleaseFile: what
// the signed attestation on the image index and on the chart carries (cosign attest
// --type slsaprovenance1 wraps it in an in-toto Statement whose subject is the artifact).
const ProvenanceFile = "provenance.json"

// ProvenanceType is the SLSA v1 provenance predicate's type.
const ProvenanceType = "https://slsa.dev/provenance/v1"

// SourceURI is the source repository as SLSA names it (a git+ URI).
const SourceURI = "git+" + Source

// The SLSA v1 provenance predicate (https://slsa.dev/provenance/v1), as far as a release
// fills it in. Plain structs rather than github.com/in-toto/attestation's protobuf types:
// those carry the parameters as structpb values, and the JSON here is what the spec and
// cosign's own decoder (in-toto-golang's slsa1 types) read.
type (
	// Provenance is the predicate.
	Provenance struct {
		BuildDefinition BuildDefinition `json:"buildDefinition"`
		RunDetails      RunDetails      `json:"runDetails"`
	}
	// BuildDefinition is how the release was built: the template, the parameters and
	// the inputs.
	BuildDefinition struct {
		BuildType            string               `json:"buildType"`
		ExternalParameters   BuildParameters      `json:"externalParameters"`
		InternalParameters   map[string]string    `json:"internalParameters,omitempty"`
		ResolvedDependencies []ResourceDescriptor `json:"resolvedDependencies"`
	}
	// BuildParameters are what the maintainer chose: make release's variables.
	BuildParameters struct {
		Version   string   `json:"version"`
		Registry  string   `json:"registry"`
		Platforms []string `json:"platforms"`
		// Source is the repository and commit make release ran in; Uncommitted: its
		// tracked files had changes (ALLOW_DIRTY).
		Source      string `json:"source"`
		Uncommitted bool   `json:"uncommittedChanges,omitempty"`
	}
	// ResourceDescriptor is one input, by URI or name, and its digests.
	ResourceDescriptor struct {
		URI    string            `json:"uri,omitempty"`
		Name   string            `json:"name,omitempty"`
		Digest map[string]string `json:"digest"`
	}
	// RunDetails say who built it and when.
	RunDetails struct {
		Builder  Builder       `json:"builder"`
		Metadata BuildMetadata `json:"metadata"`
	}
	// Builder is make release, with its Go toolchain's version.
	Builder struct {
		ID      string            `json:"id"`
		Version map[string]string `json:"version"`
	}
	// BuildMetadata is when the build started and finished.
	BuildMetadata struct {
		StartedOn  string `json:"startedOn"`
		FinishedOn string `json:"finishedOn,omitempty"`
	}
)

// ProvenanceInput is what a release's provenance records besides its options.
type ProvenanceInput struct {
	// Commit is the commit make release ran in, Uncommitted whether the tree had changes.
	Commit      string
	Uncommitted bool
	// GoVersion is the toolchain that built the binaries (go env GOVERSION).
	GoVersion string
	// ImageRevision is the image's org.opencontainers.image.revision (SourceCommit).
	ImageRevision string
	Started       time.Time
}

// BuilderID names the builder: make release of this repository.
const BuilderID = Source + "/blob/main/Makefile#release"

// NewProvenance is the predicate of a release made with o, its lock file and go.sum
// read from o.Src and recorded by digest.
func NewProvenance(o ReleaseOptions, in ProvenanceInput, finished time.Time) (*Provenance, error) {
	deps := []ResourceDescriptor{{URI: SourceURI, Digest: map[string]string{"gitCommit": in.Commit}}}
	for _, f := range []string{LockFile, "go.sum"} {
		data, err := os.ReadFile(filepath.Join(o.Src, f))
		if err != nil {
			return nil, fmt.Errorf("provenance: %w", err)
		}
		sum := sha256.Sum256(data)
		deps = append(deps, ResourceDescriptor{URI: SourceURI + "@" + in.Commit + "#" + filepath.ToSlash(f), Name: filepath.ToSlash(f),
			Digest: map[string]string{"sha256": hex.EncodeToString(sum[:])}})
	}
	var platforms []string
	for _, a := range Arches {
		platforms = append(platforms, "linux/"+a.Name)
	}
	return &Provenance{
		BuildDefinition: BuildDefinition{
			BuildType: Source + "/blob/main/docs/getting-started.md#releases",
			ExternalParameters: BuildParameters{Version: o.Version, Registry: o.Registry, Platforms: platforms,
				Source: SourceURI + "@" + in.Commit, Uncommitted: in.Uncommitted},
			InternalParameters:   map[string]string{"imageRevision": in.ImageRevision, "CGO_ENABLED": "0", "goflags": "-trimpath -buildvcs=false"},
			ResolvedDependencies: deps,
		},
		RunDetails: RunDetails{
			Builder:  Builder{ID: BuilderID, Version: map[string]string{"go": in.GoVersion}},
			Metadata: BuildMetadata{StartedOn: in.Started.UTC().Format(time.RFC3339), FinishedOn: finished.UTC().Format(time.RFC3339)},
		},
	}, nil
}

// WriteProvenance writes p to dir/ProvenanceFile and returns the file's path.
func WriteProvenance(dir string, p *Provenance) (string, error) {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return "", err
	}
	file := filepath.Join(dir, ProvenanceFile)
	return file, os.WriteFile(file, append(data, '\n'), 0o644)
}

// provenanceInput reads from git and the go command what the provenance of a release
// of src records.
func provenanceInput(ctx context.Context, goCmd, src string, sc SourceCommit, started time.Time) (ProvenanceInput, error) {
	commit, err := git(ctx, src, "rev-parse", "HEAD")
	if err != nil {
		return ProvenanceInput{}, err
	}
	status, err := git(ctx, src, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return ProvenanceInput{}, err
	}
	cmd := exec.CommandContext(ctx, goCmd, "env", "GOVERSION")
	cmd.Dir = src
	out, err := cmd.Output()
	if err != nil {
		return ProvenanceInput{}, fmt.Errorf("go env GOVERSION: %w", exitText(err))
	}
	return ProvenanceInput{Commit: commit, Uncommitted: status != "", GoVersion: strings.TrimSpace(string(out)),
		ImageRevision: sc.Revision, Started: started}, nil
}
