package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
)

// writeReleaseManifests renders deploy/manifests as make manifests does (the chart with
// deploy/release-values.yaml), checks that the packaged chart at pkg renders the same
// objects, and points the kustomize overlay at the release's image.
func writeReleaseManifests(o releaseOptions, chart, pkg string) error {
	values := filepath.Join(o.tree, "deploy", ReleaseValuesFile)
	kf, agent, err := RenderManifests(chart, values)
	if err != nil {
		return err
	}
	packaged, err := Render(pkg, nil)
	if err != nil {
		return fmt.Errorf("render the packaged chart: %w", err)
	}
	if !bytes.Equal(withoutHeader(packaged), withoutHeader(kf)) {
		return errors.New("the packaged chart renders other objects than the chart with " + ReleaseValuesFile)
	}
	dir := filepath.Join(o.tree, "deploy", "manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, data := range map[string][]byte{"kubefence.yaml": kf, "node-agent.yaml": agent} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	overlay := filepath.Join(o.tree, "deploy", "kustomize")
	if err := copyTree(filepath.Join(o.deploy, "kustomize"), overlay); err != nil {
		return err
	}
	img, err := ManifestImage(kf)
	if err != nil {
		return err
	}
	return editFile(filepath.Join(overlay, "kustomization.yaml"), func(b []byte) ([]byte, error) { return setOverlayImage(b, img.Name) })
}

// withoutHeader drops the comment lines a rendering starts with.
func withoutHeader(b []byte) []byte {
	for bytes.HasPrefix(b, []byte("#")) {
		_, b, _ = bytes.Cut(b, []byte("\n"))
	}
	return b
}

// overlayName is the images entry the overlay overrides.
var overlayName = regexp.MustCompile(`(?m)^- name: .*$`)

// setOverlayImage sets the name of the overlay's one images entry: the image the
// manifests name, which newName replaces.
func setOverlayImage(kustomization []byte, image string) ([]byte, error) {
	if len(overlayName.FindAll(kustomization, -1)) != 1 {
		return nil, errors.New("kustomization.yaml: want one images entry (- name: ...)")
	}
	return overlayName.ReplaceAll(kustomization, []byte("- name: "+image)), nil
}

// recordChart adds the chart's reference and digest to release.json.
func recordChart(file, chart, digest string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	m["chart"], m["chartDigest"] = chart, digest
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(out, '\n'), 0o644)
}

// copyTree copies the regular files under src to dst, unless they are one directory.
func copyTree(src, dst string) error {
	if same, err := sameDir(src, dst); err != nil || same {
		return err
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

func sameDir(a, b string) (bool, error) {
	ia, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	ib, err := os.Stat(b)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(ia, ib), nil
}

// editFile rewrites file with edit.
func editFile(file string, edit func([]byte) ([]byte, error)) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	out, err := edit(data)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return os.WriteFile(file, out, 0o644)
}
