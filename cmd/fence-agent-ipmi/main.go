// Command fence-agent-ipmi is the IPMI fence agent. The controller launches it as a
// go-plugin; run by hand it only prints its version.
package main

import (
	"flag"
	"fmt"

	"github.com/kubefence/kubefence/pkg/agent/ipmi"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(ipmi.Name, version)
		return
	}
	plugin.Serve(ipmi.New(ipmi.WithVersion(version)))
}
