// Command fence-agent-iscsi is the iSCSI storage fence agent: it cuts a node's initiator
// off its targets (tgt or LIO) and restores it. The controller launches it as a
// go-plugin; "serve" runs it as a remote agent over mutual TLS; -version prints its
// version.
package main

import (
	"github.com/kubefence/kubefence/pkg/buildinfo"
	"github.com/kubefence/kubefence/pkg/fenceagent/iscsi"
	"github.com/kubefence/kubefence/pkg/plugin"
)

func main() {
	plugin.Main(iscsi.New(iscsi.WithVersion(buildinfo.Version())))
}
