// Command render renders the kubefence Helm chart with its default values into
// deploy/manifests/kubefence.yaml, as `helm template --include-crds` would, using Helm's
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
	flag.Parse()
	manifest, err := Render(*chart, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, manifest, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s\n", *out)
}
