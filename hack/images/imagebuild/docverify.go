package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The markers in docs/getting-started.md before the blocks a release is verified with:
// the provenance policy (CUE) and the verify commands (sh).
const (
	PolicyDocMarker = "<!-- run by TestVerifyRelease (hack/images/imagebuild) and TestFencingOnRealNodes (test/realnode) as written: the provenance policy -->"
	VerifyDocMarker = "<!-- run by TestVerifyRelease (hack/images/imagebuild) and TestFencingOnRealNodes (test/realnode) as written: verify with a key -->"
	// PolicyFile is the name the docs save the policy under.
	PolicyFile = "kubefence-provenance.cue"
)

// DocVerifier runs docs/getting-started.md's commands that verify a release signed with
// a key, as written but for their placeholders, with the cosign CLI: in Dir, which holds
// the public key cosign.pub, as the docs say.
type DocVerifier struct {
	// Cosign is the cosign binary; Dir where the commands run.
	Cosign, Dir string
	// Registry, Version and Revision stand for the docs' REGISTRY, vX.Y.Z (and X.Y.Z)
	// and REVISION.
	Registry, Version, Revision string
}

// DocBlock is the first fenced block of language lang after marker in doc.
func DocBlock(doc, marker, lang string) (string, error) {
	_, rest, ok := strings.Cut(doc, marker)
	if !ok {
		return "", fmt.Errorf("docs/getting-started.md lost the marker %q", marker)
	}
	_, rest, ok = strings.Cut(rest, "```"+lang+"\n")
	block, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		return "", fmt.Errorf("docs/getting-started.md has no %s block after %q", lang, marker)
	}
	return block, nil
}

// WritePolicy writes the docs' provenance policy, REVISION replaced, to Dir/PolicyFile.
func (v DocVerifier) WritePolicy(doc string) error {
	block, err := DocBlock(doc, PolicyDocMarker, "cue")
	if err != nil {
		return err
	}
	if !strings.Contains(block, `"REVISION"`) {
		return errors.New("the docs' provenance policy checks no REVISION")
	}
	policy := strings.ReplaceAll(block, "REVISION", v.Revision)
	return os.WriteFile(filepath.Join(v.Dir, PolicyFile), []byte(policy), 0o644)
}

// Script is the docs' verify commands with their placeholders replaced.
func (v DocVerifier) Script(doc string) (string, error) {
	block, err := DocBlock(doc, VerifyDocMarker, "sh")
	if err != nil {
		return "", err
	}
	for _, p := range []string{"REGISTRY/kubefence:vX.Y.Z", "REGISTRY/charts/kubefence:X.Y.Z", "cosign.pub", PolicyFile} {
		if !strings.Contains(block, p) {
			return "", fmt.Errorf("the docs' verify commands do not name %s", p)
		}
	}
	r := strings.NewReplacer("REGISTRY", v.Registry, "vX.Y.Z", v.Version, "X.Y.Z", strings.TrimPrefix(v.Version, "v"))
	return r.Replace(block), nil
}

// Run runs script with bash -x (each command traced before it runs) in Dir, with only
// cosign's directory and the system's on the PATH, and returns its output.
func (v DocVerifier) Run(ctx context.Context, script string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", "-x", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir = v.Dir
	cmd.Env = []string{"PATH=" + filepath.Dir(v.Cosign) + ":/usr/bin:/bin", "HOME=" + v.Dir}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
