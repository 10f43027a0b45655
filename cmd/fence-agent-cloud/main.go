// Command fence-agent-cloud is the cloud fence agent: it stops (and starts again) the
// EC2 instance or Nova server a node's providerID names. The controller launches it
// as a go-plugin; "serve" runs it as a remote agent over mutual TLS; -version prints
// its version.
package main

import (
	"github.com/kubefence/kubefence/pkg/buildinfo"
	"github.com/kubefence/kubefence/pkg/fenceagent/cloud"
	"github.com/kubefence/kubefence/pkg/plugin"
)

func main() {
	plugin.Main(cloud.New(cloud.WithVersion(buildinfo.Version())))
}
