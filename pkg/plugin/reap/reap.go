// Package reap runs an agent's external commands (fence scripts, tgtadm) so that no
// process a call started outlives the call (safety invariant 7), including descendants
// that left the command's process group or session with setsid or setpgid, which a
// process-group kill does not reach.
//
// Each command runs under a reaper: the agent's own binary re-executed with Arg, which
// makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), so that every descendant
// whose parent dies is re-parented to it rather than to init. When the command exits,
// or the reaper is told to stop (SIGTERM from the call's deadline or cancel, or from
// the kernel when the agent dies: PR_SET_PDEATHSIG), it SIGKILLs the command's process
// group and then every child it has, again and again, reaping each, until it has no
// child left; only then does it exit. A cgroup would do the same without a helper
// process, but these machines (and many nodes) run cgroup v1 without a writable
// hierarchy for an unprivileged agent; the subreaper needs nothing but Linux 3.4.
//
// Importing the package is enough for a binary to act as its own reaper: its init
// function runs the reaper when the process was started with Arg, before main.
package reap

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Arg is the first argument that starts a binary as a reaper.
const Arg = "__kubefence-reap"

// waitDelay bounds how long a stopped reaper may take to clear its descendants before
// it is killed itself.
const waitDelay = 3 * time.Second

func init() {
	if len(os.Args) > 2 && os.Args[1] == Arg {
		os.Exit(reaper(os.Args[2], os.Args[3:]))
	}
}

// CommandContext is exec.CommandContext for a command run under a reaper: when the
// returned command's Wait returns, for whatever reason, no process it started is left.
// When ctx ends the reaper is sent SIGTERM (it kills everything and exits), and killed
// outright after a few seconds more.
func CommandContext(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable to reap %s: %w", name, err)
	}
	cmd := exec.CommandContext(ctx, self, append([]string{Arg, name}, args...)...)
	// The reaper hears of the agent's death as a SIGTERM, which it can act on.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = waitDelay
	return cmd, nil
}
