// Command render renders the kubefence Helm chart with its default values into
// deploy/manifests/kubefence.yaml, and the node agent's objects into
// deploy/manifests/node-agent.yaml, as `helm template --include-crds` would, using Helm's
// Go library so that no helm binary is needed. `make manifests` runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	chart := flag.String("chart", "../helm/kubefence", "chart directory")
	out := flag.String("out", "../manifests/kubefence.yaml", "output file")
	agentOut := flag.String("node-agent-out", "../manifests/node-agent.yaml", "output file of the node agent's objects")
	flag.Parse()
	for _, f := range []struct {
		path   string
		render func(string) ([]byte, error)
	}{
		{*out, func(dir string) ([]byte, error) { return Render(dir, nil) }},
		{*agentOut, RenderNodeAgent},
	} {
		if err := write(f.path, f.render, *chart); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("wrote %s\n", f.path)
	}
}

func write(out string, render func(string) ([]byte, error), chart string) error {
	manifest, err := render(chart)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, manifest, 0o644)
}
