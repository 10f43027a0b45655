// Command render renders the kubefence Helm chart with its default values (and the image
// of the latest release, deploy/release-values.yaml, when there is one) into
// deploy/manifests/kubefence.yaml, and the node agent's objects into
// deploy/manifests/node-agent.yaml, as `helm template --include-crds` would, using Helm's
// Go library so that no helm binary is needed. `make manifests` runs it.
//
// `go run . release -image ../../bin/release/VERSION/release.json` is make release's
// second step: the chart packaged with the release's version and image digest and
// pushed as an OCI artifact, and Chart.yaml, deploy/release-values.yaml,
// deploy/manifests and the kustomize overlay of deploy/kustomize updated to it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "release" {
		err = releaseCmd(os.Args[2:])
	} else {
		err = manifestsCmd()
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func manifestsCmd() error {
	chart := flag.String("chart", "../helm/kubefence", "chart directory")
	values := flag.String("values", "../"+ReleaseValuesFile, "the latest release's image values, used when the file exists")
	out := flag.String("out", "../manifests/kubefence.yaml", "output file")
	agentOut := flag.String("node-agent-out", "../manifests/node-agent.yaml", "output file of the node agent's objects")
	flag.Parse()
	kf, agent, err := RenderManifests(*chart, *values)
	if err != nil {
		return err
	}
	for path, data := range map[string][]byte{*out: kf, *agentOut: agent} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
		fmt.Printf("wrote %s\n", path)
	}
	return nil
}
