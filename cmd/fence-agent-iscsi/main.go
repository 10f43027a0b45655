// Command fence-agent-iscsi is the iSCSI storage fence agent: it cuts a node's initiator
// off its targets (tgt or LIO) and restores it. The controller launches it as a
// go-plugin; "serve" runs it as a remote agent over mutual TLS; -version prints its
// version.
package main

import (
	"github.com/kubefence/kubefence/pkg/agent/iscsi"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	plugin.Main(iscsi.New(iscsi.WithVersion(version)))
}
