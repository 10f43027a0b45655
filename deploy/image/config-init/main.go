// Command kubefence-config-init completes the controller's configuration inside its pod:
// it fills in the SHA-256 of every local agent from the image's read-only plugin
// directory (or checks the sha256 pinned in the chart's values), validates the result
// and writes it where fence-controller reads it. It runs as the Deployment's init
// container, so the checksums always describe the binaries of the image that runs.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/configfile"
)

func main() {
	template := flag.String("template", "/etc/kubefence/template/config.yaml", "configuration without local agents' sha256")
	pluginDir := flag.String("plugin-dir", v1alpha1.DefaultPluginDir, "directory of the agent binaries")
	out := flag.String("out", "/run/kubefence/config.yaml", "where to write the completed configuration")
	flag.Parse()
	if err := run(*template, *pluginDir, *out); err != nil {
		fmt.Fprintln(os.Stderr, "kubefence-config-init:", err)
		os.Exit(1)
	}
}

func run(template, pluginDir, out string) error {
	data, err := os.ReadFile(template)
	if err != nil {
		return err
	}
	completed, sums, err := complete(data, pluginDir)
	if err != nil {
		return err
	}
	_, warnings, err := configfile.Decode(completed)
	for _, w := range warnings {
		fmt.Fprintln(os.Stderr, "kubefence-config-init: warning:", w)
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, completed, 0o444); err != nil {
		return err
	}
	for name, sum := range sums {
		// Printed so that an operator can pin them (agents[].sha256) from the pod's log.
		fmt.Printf("agent %s sha256 %s\n", name, sum)
	}
	return nil
}

// complete sets agents[].sha256 of every agent that has no address, from the binary in
// pluginDir; a sha256 already set must match.
func complete(data []byte, pluginDir string) ([]byte, map[string]string, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, nil, fmt.Errorf("parse template: %w", err)
	}
	agents, _ := cfg["agents"].([]any)
	sums := map[string]string{}
	for i, item := range agents {
		a, ok := item.(map[string]any)
		if !ok {
			return nil, nil, fmt.Errorf("agents[%d]: not a mapping", i)
		}
		if addr, _ := a["address"].(string); addr != "" {
			continue
		}
		name, _ := a["name"].(string)
		bin, _ := a["binary"].(string)
		if bin == "" {
			bin = name
		}
		if bin != filepath.Base(bin) {
			return nil, nil, fmt.Errorf("agents[%d].binary: %q must be a file name", i, bin)
		}
		sum, err := fileSHA256(filepath.Join(pluginDir, bin))
		if err != nil {
			return nil, nil, fmt.Errorf("agents[%d]: %w", i, err)
		}
		pinned, isString := a["sha256"].(string)
		if v, set := a["sha256"]; set && !isString {
			return nil, nil, fmt.Errorf("agents[%d].sha256: %v is not a string (quote it)", i, v)
		}
		if pinned != "" && pinned != sum {
			return nil, nil, fmt.Errorf("agents[%d].sha256: pinned %s, but %s in %s is %s", i, pinned, bin, pluginDir, sum)
		}
		a["sha256"] = sum
		sums[name] = sum
	}
	completed, err := yaml.Marshal(cfg)
	return completed, sums, err
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
