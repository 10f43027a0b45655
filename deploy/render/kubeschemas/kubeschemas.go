// Package kubeschemas makes the JSON Schemas that kubeconform checks Kubernetes objects
// against, offline but for the Go module proxy: those of the kinds a Kubernetes apiserver
// serves, from the OpenAPI v2 document in the k8s.io/kubernetes module of that version
// (api/openapi-spec/swagger.json), and those of the Prometheus Operator's custom
// resources, from the CustomResourceDefinitions in its module.
//
// Each kind is one self-contained file in kubeconform's local layout (FileName), strict:
// an object whose fields are listed admits no others, as `kubeconform -strict` and the
// apiserver's strict field validation expect. int-or-string and quantity fields take the
// JSON types the apiserver decodes; apiVersion and kind are pinned to the file's own.
// null is refused wherever the document gives a type, although the apiserver reads an
// optional field's null as its absence: in a chart's output a null is nearly always a
// value that rendered empty, worth a look.
package kubeschemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	jsonschema "github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

const (
	// KubernetesVersion is the release whose apiserver schemas are made: the newest patch
	// the module proxy serves of the lowest minor the chart claims (Chart.yaml's
	// kubeVersion). Patch releases do not change the API.
	KubernetesVersion = "v1.31.14"
	// PrometheusOperatorVersion is the Prometheus Operator release whose
	// monitoring.coreos.com CRDs (ServiceMonitor, PrometheusRule, ...) are made into
	// schemas; the only one of its main module that the module proxy serves here.
	PrometheusOperatorVersion = "v0.85.0"

	kubernetesModule = "k8s.io/kubernetes"
	swaggerPath      = "api/openapi-spec/swagger.json"
	promModule       = "github.com/prometheus-operator/prometheus-operator"
	promCRDDir       = "example/prometheus-operator-crd"

	// generation names the conversion; a directory made by another is made again. Change
	// it with the conversion.
	generation = "kubeschemas 1"
	// stampFile marks a finished directory, holding what made it.
	stampFile = ".complete"
	// DefinitionsFile, in a Kubernetes directory, holds every converted definition of
	// the OpenAPI document, for CRD schemas made later against the same version.
	DefinitionsFile = "_definitions.json"
)

// Locations are the directories of a set of schemas.
type Locations struct {
	// Kubernetes holds a file per kind the apiserver serves.
	Kubernetes string
	// PrometheusOperator holds a file per Prometheus Operator custom resource kind.
	PrometheusOperator string
}

// Templates are the locations as kubeconform's schema locations.
func (l Locations) Templates() []string {
	return []string{Template(l.Kubernetes), Template(l.PrometheusOperator)}
}

// Template is dir as a kubeconform schema location.
func Template(dir string) string {
	return filepath.Join(dir, "{{ .ResourceKind }}{{ .KindSuffix }}.json")
}

// Dirs are where Ensure keeps the schemas under cache (the repository's .cache).
func Dirs(cache string) Locations {
	root := filepath.Join(cache, "kubeschemas")
	return Locations{
		Kubernetes:         filepath.Join(root, KubernetesVersion),
		PrometheusOperator: filepath.Join(root, KubernetesVersion+"-prometheus-operator-"+PrometheusOperatorVersion),
	}
}

// Ensure returns the schema directories under cache, first making those that are missing
// or were made by another version of this package. Making them needs the modules from the
// Go module proxy (or the module cache), through the go command; logf, if not nil, hears
// what is being made.
func Ensure(cache string, logf func(format string, args ...any)) (Locations, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	l := Dirs(cache)
	stamp := fmt.Sprintf("%s %s %s\n", generation, kubernetesModule, KubernetesVersion)
	err := ensureDir(l.Kubernetes, stamp, func(dir string) error {
		logf("kubeschemas: making the schemas of Kubernetes %s in %s", KubernetesVersion, l.Kubernetes)
		mod, err := moduleDir(kubernetesModule, KubernetesVersion)
		if err != nil {
			return err
		}
		swagger, err := os.ReadFile(filepath.Join(mod, swaggerPath))
		if err != nil {
			return err
		}
		api, err := newAPIConverter(swagger)
		if err != nil {
			return err
		}
		files, err := api.kindFiles()
		if err != nil {
			return err
		}
		if err := writeFiles(dir, files); err != nil {
			return err
		}
		return writeJSON(filepath.Join(dir, DefinitionsFile), schema{"definitions": api.conv})
	})
	if err != nil {
		return l, fmt.Errorf("schemas of Kubernetes %s: %w", KubernetesVersion, err)
	}
	stamp = fmt.Sprintf("%s %s %s %s %s\n", generation, kubernetesModule, KubernetesVersion, promModule, PrometheusOperatorVersion)
	err = ensureDir(l.PrometheusOperator, stamp, func(dir string) error {
		logf("kubeschemas: making the schemas of Prometheus Operator %s in %s", PrometheusOperatorVersion, l.PrometheusOperator)
		mod, err := moduleDir(promModule, PrometheusOperatorVersion)
		if err != nil {
			return err
		}
		crds, err := filepath.Glob(filepath.Join(mod, promCRDDir, "*.yaml"))
		if err != nil {
			return err
		}
		if len(crds) == 0 {
			return fmt.Errorf("no CRDs in %s", filepath.Join(mod, promCRDDir))
		}
		files := map[string]schema{}
		if err := CRDFiles(l.Kubernetes, crds, files); err != nil {
			return err
		}
		return writeFiles(dir, files)
	})
	if err != nil {
		return l, fmt.Errorf("schemas of Prometheus Operator %s: %w", PrometheusOperatorVersion, err)
	}
	return l, nil
}

// CRDFiles adds to files the schemas of the CustomResourceDefinitions in the YAML files
// named, with metadata checked against the definitions kept in kubeDir (a Kubernetes
// directory that Ensure made).
func CRDFiles(kubeDir string, yamlFiles []string, files map[string]schema) error {
	b, err := os.ReadFile(filepath.Join(kubeDir, DefinitionsFile))
	if err != nil {
		return err
	}
	var defs struct {
		Definitions map[string]schema `json:"definitions"`
	}
	if err := json.Unmarshal(b, &defs); err != nil {
		return fmt.Errorf("%s: %w", DefinitionsFile, err)
	}
	if defs.Definitions[objectMeta] == nil {
		return fmt.Errorf("%s has no %s", DefinitionsFile, objectMeta)
	}
	conv := crdConverter{api: &apiConverter{conv: defs.Definitions}}
	for _, f := range yamlFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, doc := range splitYAML(b) {
			j, err := yaml.YAMLToJSON(doc)
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if err := conv.files(j, files); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	return nil
}

// splitYAML is the non-empty documents of a YAML stream.
func splitYAML(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), b...), []byte("\n---")) {
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

// ensureDir makes dir with fill unless it holds stamp already. fill writes into a fresh
// directory beside dir, which then replaces dir whole, so that an interrupted run or one
// beside another leaves no half-made directory behind.
func ensureDir(dir, stamp string, fill func(dir string) error) error {
	if b, err := os.ReadFile(filepath.Join(dir, stampFile)); err == nil && string(b) == stamp {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".new-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := fill(tmp); err != nil {
		return err
	}
	if err := checkCompiles(tmp); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, stampFile), []byte(stamp), 0o644); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(dir); err == nil {
		old, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".old-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(old)
		if err := os.Rename(dir, filepath.Join(old, "d")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another run may have put its own in place meanwhile.
		if b, rerr := os.ReadFile(filepath.Join(dir, stampFile)); rerr == nil && string(b) == stamp {
			return nil
		}
		return err
	}
	return nil
}

// checkCompiles compiles every schema file in dir as kubeconform does (draft 4, file
// locations), so that a file kubeconform could not compile, which it would report only as
// a missing schema, is caught where it is made.
func checkCompiles(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, f := range files {
		if filepath.Base(f) == DefinitionsFile {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(f), err)
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft4)
		if err := c.AddResource(f, doc); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(f), err)
		}
		if _, err := c.Compile(f); err != nil {
			return fmt.Errorf("%s does not compile: %w", filepath.Base(f), err)
		}
	}
	return nil
}

func writeFiles(dir string, files map[string]schema) error {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := writeJSON(filepath.Join(dir, name), files[name]); err != nil {
			return err
		}
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return os.WriteFile(path, b, 0o644)
}

// moduleDir is the directory of module path at version in the module cache, downloaded
// through the Go module proxy if it is not there yet.
func moduleDir(path, version string) (string, error) {
	gomod, err := os.MkdirTemp("", "kubeschemas-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(gomod)
	if err := os.WriteFile(filepath.Join(gomod, "go.mod"), []byte("module kubeschemas.local\n\ngo 1.22\n"), 0o644); err != nil {
		return "", err
	}
	cmd := exec.Command(goCommand(), "mod", "download", "-json", path+"@"+version)
	cmd.Dir = gomod
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Error != "" || info.Dir == "" || runErr != nil {
		msg := strings.TrimSpace(info.Error)
		if msg == "" {
			msg = strings.TrimSpace(stderr.String())
		}
		if msg == "" && runErr != nil {
			msg = runErr.Error()
		}
		return "", fmt.Errorf("go mod download %s@%s: %s", path, version, msg)
	}
	return info.Dir, nil
}

// goCommand is the go command of the toolchain running, else the one on PATH.
func goCommand() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); isFile(p) {
			return p
		}
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}
