package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/chart/loader"
	helmregistry "helm.sh/helm/v3/pkg/registry"
)

// TestReleaseChart runs the chart's step of make release against a registry: the chart
// pushed as an OCI artifact with version = appVersion = the release's, its values on the
// release's image by digest; the checkout's files updated to it; and a second run of the
// same release giving the same chart, byte for byte and by digest. The first run pushes
// it by digest only (-untagged, as make release does before signing it): no tag names it
// yet.
func TestReleaseChart(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	digest := "sha256:" + strings.Repeat("ab", 32)
	var chartDigests []string
	var packages [][]byte
	for _, untagged := range []bool{true, false} {
		dir := t.TempDir()
		rel := released{Version: "v0.1.0", ChartVersion: "0.1.0", Created: "2026-01-02T03:04:05Z", Registry: host,
			Repository: "kubefence/kubefence", Image: host + "/kubefence/kubefence", Digest: digest, Insecure: true}
		data, err := json.Marshal(rel)
		if err != nil {
			t.Fatal(err)
		}
		image := filepath.Join(dir, "out", "release.json")
		if err := os.MkdirAll(filepath.Dir(image), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(image, data, 0o644); err != nil {
			t.Fatal(err)
		}
		tree := filepath.Join(dir, "tree")
		o := releaseOptions{image: image, out: filepath.Dir(image), chart: chartDir, deploy: "..", tree: tree, untagged: untagged}
		if err := release(o); err != nil {
			t.Fatal(err)
		}
		tag, err := name.NewTag(host + "/kubefence/charts/kubefence:0.1.0")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := remote.Head(tag); (err == nil) == untagged {
			t.Errorf("untagged %v: the chart's tag: %v", untagged, err)
		}
		checkReleasedTree(t, tree, host+"/kubefence/kubefence:0.1.0@"+digest)
		var recorded struct{ Chart, ChartDigest string }
		if b, err := os.ReadFile(image); err != nil || json.Unmarshal(b, &recorded) != nil || recorded.Chart != "oci://"+host+"/kubefence/charts/kubefence" {
			t.Fatalf("release.json after the chart's step: %+v (%v)", recorded, err)
		}
		chartDigests = append(chartDigests, recorded.ChartDigest)
		pkg, err := os.ReadFile(filepath.Join(o.out, "kubefence-0.1.0.tgz"))
		if err != nil {
			t.Fatal(err)
		}
		packages = append(packages, pkg)
	}
	if chartDigests[0] != chartDigests[1] || !bytes.Equal(packages[0], packages[1]) {
		t.Errorf("two runs of one release: chart digests %v, packages equal %v", chartDigests, bytes.Equal(packages[0], packages[1]))
	}

	// What helm install oci://... --version 0.1.0 pulls.
	client, err := helmregistry.NewClient(helmregistry.ClientOptPlainHTTP(), helmregistry.ClientOptWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Pull(host + "/kubefence/charts/kubefence:0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.Digest != chartDigests[0] || !bytes.Equal(res.Chart.Data, packages[0]) {
		t.Errorf("pulled chart %s, pushed %s", res.Manifest.Digest, chartDigests[0])
	}
	ch, err := loader.LoadArchive(bytes.NewReader(res.Chart.Data))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "0.1.0" || ch.Metadata.AppVersion != "0.1.0" {
		t.Errorf("pulled chart: version %q appVersion %q, want 0.1.0", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
	img, _ := ch.Values["image"].(map[string]any)
	if img["registry"] != host || img["repository"] != "kubefence/kubefence" || img["digest"] != digest {
		t.Errorf("pulled chart's image values: %v", img)
	}
}

// checkReleasedTree: the files a release commit holds name image.
func checkReleasedTree(t *testing.T, tree, image string) {
	t.Helper()
	read := func(p string) []byte {
		b, err := os.ReadFile(filepath.Join(tree, p))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, p := range []string{"deploy/manifests/kubefence.yaml", "deploy/manifests/node-agent.yaml"} {
		got, err := ManifestImage(read(p))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if got.Name+":"+got.Tag+"@"+got.Digest != image {
			t.Errorf("%s pulls %+v, want %s", p, got, image)
		}
	}
	if k := string(read("deploy/kustomize/kustomization.yaml")); !strings.Contains(k, "\n- name: "+ParseImage(image).Name+"\n") {
		t.Errorf("the overlay names another image than %s:\n%s", image, k)
	}
	if c := string(read("deploy/helm/kubefence/Chart.yaml")); !strings.Contains(c, "\nversion: 0.1.0\n") || !strings.Contains(c, "\nappVersion: \"0.1.0\"\n") {
		t.Errorf("Chart.yaml:\n%s", c)
	}
	// make manifests renders the same files from the checkout's chart and release-values.
	kf, agent, err := RenderManifests(filepath.Join(tree, "deploy/helm/kubefence"), filepath.Join(tree, "deploy", ReleaseValuesFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(kf, read("deploy/manifests/kubefence.yaml")) || !bytes.Equal(agent, read("deploy/manifests/node-agent.yaml")) {
		t.Error("make manifests in the release's checkout would change deploy/manifests")
	}
}

func TestSetImageValues(t *testing.T) {
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := setImageValues(values, "reg.example:5000", "kubefence/kubefence", "sha256:"+strings.Repeat("0", 64))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(out), "\n") != strings.Count(string(values), "\n") || !strings.Contains(string(out), "# Default: the chart's appVersion.") {
		t.Error("setImageValues changed more than the three values")
	}
	if _, err := setImageValues([]byte("image:\n  repository: x\n"), "r", "x", "d"); err == nil {
		t.Error("values without image.registry and image.digest accepted")
	}
	if _, err := setChartVersion([]byte("name: kubefence\n"), "0.1.0"); err == nil {
		t.Error("a Chart.yaml without version accepted")
	}
}
