package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"sigs.k8s.io/yaml"
)

// released is what `hack/images release` wrote (imagebuild.Released), as far as the
// chart needs it, plus what this step adds.
type released struct {
	Version      string `json:"version"`
	ChartVersion string `json:"chartVersion"`
	Created      string `json:"created"`
	Registry     string `json:"registry"`
	Repository   string `json:"repository"`
	Image        string `json:"image"`
	Digest       string `json:"digest"`
	Insecure     bool   `json:"insecure,omitempty"`
}

// ReleaseValuesFile holds the image of the latest release, relative to deploy/: make
// release writes it, make manifests renders deploy/manifests with it, and
// `helm install -f` it installs that image from a checkout.
const ReleaseValuesFile = "release-values.yaml"

// releaseOptions say where the release's chart and files go.
type releaseOptions struct {
	// image is the release.json of hack/images' step; out its directory, which also gets
	// the packaged chart.
	image, out string
	// chart is the chart in this checkout; deploy its deploy/ directory.
	chart, deploy string
	// tree is where the release writes the files of its commit: tree/deploy/... (the
	// checkout itself by default).
	tree string
	// push is the chart's OCI repository; empty: REGISTRY/charts from release.json.
	push string
	// untagged pushes the chart by digest only: make release tags a signed chart after
	// its signature (hack/images sign-chart).
	untagged bool
}

// releaseCmd is `go run . release`: the chart of a release packaged and pushed, and the
// checkout's files updated to the release (Chart.yaml, release-values.yaml, manifests,
// kustomize overlay).
func releaseCmd(args []string) error {
	fs := flag.NewFlagSet("render release", flag.ContinueOnError)
	var o releaseOptions
	fs.StringVar(&o.image, "image", "", "release.json written by hack/images release")
	fs.StringVar(&o.chart, "chart", "../helm/kubefence", "chart directory")
	fs.StringVar(&o.deploy, "deploy", "..", "the checkout's deploy/ directory")
	fs.StringVar(&o.tree, "tree", "../..", "write Chart.yaml, deploy/"+ReleaseValuesFile+", deploy/manifests and deploy/kustomize under `DIR`")
	fs.StringVar(&o.push, "push", "", "OCI repository for the chart (default: REGISTRY/charts, from -image)")
	fs.BoolVar(&o.untagged, "untagged", false, "push the chart by digest only (hack/images sign-chart tags it once signed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.image == "" {
		return errors.New("release: -image FILE (release.json of hack/images release) is required")
	}
	o.out = filepath.Dir(o.image)
	return release(o)
}

func release(o releaseOptions) error {
	data, err := os.ReadFile(o.image)
	if err != nil {
		return err
	}
	var rel released
	if err := json.Unmarshal(data, &rel); err != nil {
		return fmt.Errorf("%s: %w", o.image, err)
	}
	if rel.ChartVersion == "" || !strings.HasPrefix(rel.Digest, "sha256:") {
		return fmt.Errorf("%s: no chartVersion or image digest", o.image)
	}
	created, err := time.Parse(time.RFC3339, rel.Created)
	if err != nil {
		return fmt.Errorf("%s: created: %w", o.image, err)
	}
	chart := filepath.Join(o.tree, "deploy", "helm", "kubefence")
	if err := copyTree(o.chart, chart); err != nil {
		return err
	}
	if err := editFile(filepath.Join(chart, "Chart.yaml"), func(b []byte) ([]byte, error) { return setChartVersion(b, rel.ChartVersion) }); err != nil {
		return err
	}
	values := releaseValues(rel)
	if err := os.WriteFile(filepath.Join(o.tree, "deploy", ReleaseValuesFile), values, 0o644); err != nil {
		return err
	}
	pkg, err := packageChart(chart, rel, created)
	if err != nil {
		return err
	}
	file := filepath.Join(o.out, "kubefence-"+rel.ChartVersion+".tgz")
	if err := os.WriteFile(file, pkg, 0o644); err != nil {
		return err
	}
	if err := writeReleaseManifests(o, chart, file); err != nil {
		return err
	}
	repo := o.push
	if repo == "" {
		repo = strings.TrimSuffix(rel.Image, "/kubefence") + "/charts"
	}
	digest, err := pushChart(pkg, repo, rel, created, o.untagged)
	if err != nil {
		return err
	}
	if !o.untagged {
		fmt.Printf("oci://%s/kubefence:%s@%s\n", repo, rel.ChartVersion, digest)
	}
	return recordChart(o.image, "oci://"+repo+"/kubefence", digest)
}

// releaseValues is deploy/release-values.yaml for rel.
func releaseValues(rel released) []byte {
	return []byte(fmt.Sprintf(`# The image of release %s, written by make release: make manifests renders
# deploy/manifests with it, and helm install -f deploy/%s installs it from a checkout.
image:
  registry: %q
  repository: %q
  digest: %q
`, rel.Version, ReleaseValuesFile, rel.Registry, rel.Repository, rel.Digest))
}

var (
	chartVersionLine = regexp.MustCompile(`(?m)^version: .*$`)
	appVersionLine   = regexp.MustCompile(`(?m)^appVersion: .*$`)
)

// setChartVersion sets version and appVersion in a Chart.yaml, comments kept.
func setChartVersion(chartYAML []byte, version string) ([]byte, error) {
	if len(chartVersionLine.FindAll(chartYAML, -1)) != 1 || len(appVersionLine.FindAll(chartYAML, -1)) != 1 {
		return nil, errors.New("Chart.yaml: want one version and one appVersion line")
	}
	out := chartVersionLine.ReplaceAll(chartYAML, []byte("version: "+version))
	return appVersionLine.ReplaceAll(out, []byte(fmt.Sprintf("appVersion: %q", version))), nil
}

// setImageValues sets image.registry, .repository and .digest in a values.yaml, comments
// kept, and checks the result.
func setImageValues(valuesYAML []byte, registry, repository, digest string) ([]byte, error) {
	lines := strings.Split(string(valuesYAML), "\n")
	start := slices.Index(lines, "image:")
	if start < 0 {
		return nil, errors.New("values.yaml: no top-level image:")
	}
	want := map[string]string{"registry": registry, "repository": repository, "digest": digest}
	set := map[string]bool{}
	for i := start + 1; i < len(lines) && (lines[i] == "" || strings.HasPrefix(lines[i], " ")); i++ {
		key, _, ok := strings.Cut(strings.TrimPrefix(lines[i], "  "), ":")
		if v, mine := want[key]; ok && mine && strings.HasPrefix(lines[i], "  "+key+":") {
			lines[i] = fmt.Sprintf("  %s: %q", key, v)
			set[key] = true
		}
	}
	if len(set) != len(want) {
		return nil, fmt.Errorf("values.yaml: image lacks one of registry, repository, digest (found %v)", set)
	}
	out := []byte(strings.Join(lines, "\n"))
	var check struct {
		Image map[string]any `json:"image"`
	}
	if err := yaml.Unmarshal(out, &check); err != nil {
		return nil, err
	}
	for k, v := range want {
		if check.Image[k] != v {
			return nil, fmt.Errorf("values.yaml: image.%s reads back as %v, want %q", k, check.Image[k], v)
		}
	}
	return out, nil
}

// packageChart packs the chart at dir as `helm package` would, its values.yaml pointing
// at the release's image, with every file's time the release's and in a fixed order, so
// that the same release gives the same bytes.
func packageChart(dir string, rel released, created time.Time) ([]byte, error) {
	ch, err := loader.Load(dir) // as helm package: .helmignore applies
	if err != nil {
		return nil, err
	}
	files := slices.Clone(ch.Raw)
	slices.SortFunc(files, func(a, b *chart.File) int { return strings.Compare(a.Name, b.Name) })
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		data := f.Data
		if f.Name == "values.yaml" {
			if data, err = setImageValues(data, rel.Registry, rel.Repository, rel.Digest); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Name: ch.Name() + "/" + f.Name, Mode: 0o644, Size: int64(len(data)), ModTime: created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if _, err := loader.LoadArchive(bytes.NewReader(b.Bytes())); err != nil {
		return nil, fmt.Errorf("the packaged chart does not load: %w", err)
	}
	return b.Bytes(), nil
}
