// Command fence-agent-ipmi is the IPMI fence agent. The controller launches it as a
// go-plugin; "serve" runs it as a remote agent over mutual TLS; -version prints
// its version.
package main

import (
	"github.com/kubefence/kubefence/pkg/buildinfo"
	"github.com/kubefence/kubefence/pkg/fenceagent/ipmi"
	"github.com/kubefence/kubefence/pkg/plugin"
)

func main() {
	plugin.Main(ipmi.New(ipmi.WithVersion(buildinfo.Version())))
}
