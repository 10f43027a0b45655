//go:build !linux

package plugin

import "os/exec"

// dieWithParent has no portable equivalent outside Linux; agents there rely on the
// host's Kill at shutdown.
func dieWithParent(*exec.Cmd) {}
