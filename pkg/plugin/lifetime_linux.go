package plugin

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel SIGKILL an agent process when the controller that
// launched it dies, however it dies (SIGKILL, os.Exit on a lost Lease, a crash): a
// deposed leader's agent must not outlive it (safety invariant 7). The signal follows
// the launching thread; Go's runtime ends a thread only when a goroutine locked to it
// exits, which launch never does.
func dieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
