package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const overlayDir = "../kustomize"

// TestOverlayNamesManifestImage: the overlay overrides the image the manifests name, so
// that newName takes effect (make release keeps the two in step).
func TestOverlayNamesManifestImage(t *testing.T) {
	m, err := os.ReadFile(manifests)
	if err != nil {
		t.Fatal(err)
	}
	img, err := ManifestImage(m)
	if err != nil {
		t.Fatal(err)
	}
	k, err := os.ReadFile(filepath.Join(overlayDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(k), "\n- name: "+img.Name+"\n") {
		t.Errorf("deploy/kustomize overrides another image than the manifests' %s:\n%s", img.Name, k)
	}
}

// TestOverlayFromOwnRegistry builds deploy/kustomize as `kubectl apply -k` does (the
// kustomize API), with newName set to a registry of one's own, over the manifests as they
// are and as a release renders them (with a digest): every container, init containers
// included, runs the new name with the manifests' tag and digest.
func TestOverlayFromOwnRegistry(t *testing.T) {
	kf, err := os.ReadFile(manifests)
	if err != nil {
		t.Fatal(err)
	}
	released := strings.ReplaceAll(string(kf), "image: kubefence/kubefence:0.2.0",
		"image: 10.77.0.1:5000/kubefence/kubefence:0.2.0@sha256:"+strings.Repeat("ab", 32))
	for name, manifest := range map[string]string{"as committed": string(kf), "as released": released} {
		t.Run(name, func(t *testing.T) {
			want, err := ManifestImage([]byte(manifest))
			if err != nil {
				t.Fatal(err)
			}
			out := buildOverlay(t, manifest, want.Name, "registry.example:5000/mirror/kubefence")
			got, err := ManifestImage(out)
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != "registry.example:5000/mirror/kubefence" || got.Tag != want.Tag || got.Digest != want.Digest {
				t.Errorf("the overlay renders %+v, want registry.example:5000/mirror/kubefence with tag %q and digest %q", got, want.Tag, want.Digest)
			}
			if n := strings.Count(string(out), "image: registry.example:5000/mirror/kubefence"); n < 3 {
				t.Errorf("%d containers run the new image, want the controller and its two init containers", n)
			}
		})
	}
}

// buildOverlay copies deploy/kustomize next to manifest (as deploy/manifests, with its
// kustomization), names
// image in it and sets its newName, and builds it with the kustomize API.
func buildOverlay(t *testing.T, manifest, image, newName string) []byte {
	t.Helper()
	dir := t.TempDir()
	k, err := os.ReadFile(filepath.Join(overlayDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	edited, err := setOverlayImage(k, image)
	if err != nil {
		t.Fatal(err)
	}
	edited = []byte(strings.Replace(string(edited), "newName: registry.example/kubefence/kubefence", "newName: "+newName, 1))
	base, err := os.ReadFile("../manifests/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for p, data := range map[string][]byte{"kustomize/kustomization.yaml": edited,
		"manifests/kustomization.yaml": base, "manifests/kubefence.yaml": []byte(manifest)} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(dir, "kustomize"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return out
}
