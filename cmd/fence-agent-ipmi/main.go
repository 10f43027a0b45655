// Command fence-agent-ipmi is the IPMI fence agent. The controller launches it as a
// go-plugin; "serve" runs it as a remote agent over mutual TLS; -version prints
// its version.
package main

import (
	"github.com/kubefence/kubefence/pkg/agent/ipmi"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	plugin.Main(ipmi.New(ipmi.WithVersion(version)))
}
