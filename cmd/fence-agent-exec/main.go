// Command fence-agent-exec runs existing ClusterLabs fence_* scripts through the
// FenceAgentAPI stdin protocol. The controller launches it as a go-plugin;
// "serve" runs it as a remote agent over mutual TLS; -version prints its version.
package main

import (
	"github.com/kubefence/kubefence/pkg/buildinfo"
	"github.com/kubefence/kubefence/pkg/fenceagent/exec"
	"github.com/kubefence/kubefence/pkg/plugin"
)

func main() {
	plugin.Main(exec.New(exec.WithVersion(buildinfo.Version())))
}
