package imagebuild

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Signer signs a release's artifacts and attaches its provenance with the cosign CLI
// (hack/deps.sh builds it into .cache/bin from the Go module proxy), the same binary whose
// commands docs/getting-started.md gives for verifying a release. Signatures and
// attestations go where cosign puts them by default (the sha256-DIGEST.sig and .att tags
// beside the artifact), which cosign verify, Kyverno and the policy-controller read.
type Signer struct {
	// Cosign is the cosign binary.
	Cosign string
	// Key is cosign's --key: a private key file (its password from COSIGN_PASSWORD in the
	// environment, never an argument), env://VAR, or a KMS URI (awskms://, gcpkms://,
	// azurekms://, hashivault://).
	Key string
	// Tlog uploads every signature to the Rekor transparency log. Off, cosign verify needs
	// --insecure-ignore-tlog=true.
	Tlog bool
	// Insecure: the registry speaks plain HTTP.
	Insecure bool
	// Env is added to the process's environment for cosign (e.g. COSIGN_PASSWORD).
	Env []string
	// Log receives cosign's output.
	Log io.Writer
}

// Sign signs the manifest at ref (REPO@DIGEST); recursive: an index's images too.
func (s *Signer) Sign(ctx context.Context, ref string, recursive bool) error {
	args := []string{"sign", "--recursive=" + fmt.Sprint(recursive)}
	return s.run(ctx, "sign "+ref, append(args, s.flags(ref)...)...)
}

// Attest attaches the SLSA v1 provenance predicate in file to ref as a signed in-toto
// attestation.
func (s *Signer) Attest(ctx context.Context, ref, file string) error {
	args := []string{"attest", "--type", "slsaprovenance1", "--predicate", file}
	return s.run(ctx, "attest the provenance of "+ref, append(args, s.flags(ref)...)...)
}

// flags are sign's and attest's common flags, the reference last.
func (s *Signer) flags(ref string) []string {
	f := []string{"--key", s.Key, "--tlog-upload=" + fmt.Sprint(s.Tlog), "--yes"}
	if s.Insecure {
		f = append(f, "--allow-http-registry", "--allow-insecure-registry")
	}
	return append(f, ref)
}

func (s *Signer) run(ctx context.Context, what string, args ...string) error {
	if s.Key == "" {
		return errors.New(what + ": no key (COSIGN_KEY)")
	}
	if _, err := os.Stat(s.Cosign); err != nil {
		return fmt.Errorf("%s: the cosign CLI: %w (hack/deps.sh cosign builds it)", what, err)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, s.Cosign, args...)
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if s.Log != nil {
		_, _ = s.Log.Write(out.Bytes())
	}
	if err != nil {
		return fmt.Errorf("%s: cosign %s: %w: %s (a key file's password comes from COSIGN_PASSWORD)", what, args[0], err, lastLine(out.String()))
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// signRelease signs what publish pushed, before the index is tagged: the index and its
// platform images, each SBOM artifact; then it attests the index's provenance.
func signRelease(ctx context.Context, s *Signer, out, image string, rel *Released) error {
	index := image + "@" + rel.Digest
	if err := s.Sign(ctx, index, true); err != nil {
		return err
	}
	for _, ri := range rel.Images {
		if err := s.Sign(ctx, image+"@"+ri.SBOM, false); err != nil {
			return fmt.Errorf("the %s SBOM: %w", ri.Platform, err)
		}
	}
	if err := s.Attest(ctx, index, filepath.Join(out, ProvenanceFile)); err != nil {
		return err
	}
	rel.Signed = true
	return nil
}

// SignChart signs the chart that the chart's step of make release pushed by digest and
// recorded in dir's ReleaseFile, attaches the release's provenance to it, and only then
// tags it with the chart's version.
func SignChart(ctx context.Context, s *Signer, dir string) error {
	file := filepath.Join(dir, ReleaseFile)
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var rel Released
	if err := json.Unmarshal(data, &rel); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if !strings.HasPrefix(rel.Chart, "oci://") || !strings.HasPrefix(rel.ChartDigest, "sha256:") {
		return fmt.Errorf("%s: chart %q, chartDigest %q: run the chart's step (deploy/render release) first", file, rel.Chart, rel.ChartDigest)
	}
	ref := strings.TrimPrefix(rel.Chart, "oci://") + "@" + rel.ChartDigest
	if err := s.Sign(ctx, ref, false); err != nil {
		return fmt.Errorf("the chart: %w", err)
	}
	if err := s.Attest(ctx, ref, filepath.Join(dir, ProvenanceFile)); err != nil {
		return err
	}
	return tagChart(ctx, ref, rel.ChartVersion, s.Insecure)
}

// tagChart tags the chart at ref (REPO@DIGEST) with version.
func tagChart(ctx context.Context, ref, version string, insecure bool) error {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	d, err := name.NewDigest(ref, opts...)
	if err != nil {
		return fmt.Errorf("the chart %s: %w", ref, err)
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	desc, err := remote.Get(d, ropts...)
	if err != nil {
		return fmt.Errorf("the chart %s: %w", ref, err)
	}
	if err := remote.Tag(d.Context().Tag(version), desc, ropts...); err != nil {
		return fmt.Errorf("tag the chart %s: %w", d.Context().Tag(version), err)
	}
	return nil
}
