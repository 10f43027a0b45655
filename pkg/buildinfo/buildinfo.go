// Package buildinfo holds what a kubefence binary knows of its own build: the version
// and revision stamped in at link time, one mechanism for make build, make images and
// releases:
//
//	go build -ldflags "-X github.com/kubefence/kubefence/pkg/buildinfo.version=v0.3.0 \
//	  -X github.com/kubefence/kubefence/pkg/buildinfo.revision=$(git rev-parse HEAD)"
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X; see the package comment.
var (
	version  = "dev"
	revision = ""
)

// Version is the release version, or "dev" for an unstamped build.
func Version() string { return version }

// Revision is the source revision: the stamped one, or the VCS revision Go recorded.
func Revision() string {
	if revision != "" {
		return revision
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// GoVersion is the Go release the binary was built with.
func GoVersion() string { return runtime.Version() }

// String describes the build in one line, for --version.
func String(name string) string {
	return fmt.Sprintf("%s %s (revision %s, %s)", name, Version(), Revision(), GoVersion())
}
