package plugin

import (
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// The lifeline is a pipe from the controller to each agent it launches: the agent holds
// the read end and the controller the write end, on which it never writes. When the
// controller is gone, however it went, the kernel closes the write end and the agent's
// read returns: the agent exits. It backs up the parent-death signal, which Linux ties
// to the launching thread rather than the process, and works where that signal does not
// exist.
const (
	lifelineEnv = "KUBEFENCE_LIFELINE_FD"
	// lifelineFD is the read end's number in the agent: the first of cmd.ExtraFiles.
	lifelineFD = 3
	// LifelineExitCode is an agent's exit code when its controller is gone.
	LifelineExitCode = 3
)

// attachLifeline gives cmd the read end of a new lifeline and returns the write end,
// which the caller keeps open for as long as the agent may live, and the read end, which
// the caller closes once the agent has started.
func attachLifeline(cmd *exec.Cmd) (w, r *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	cmd.Env = append(cmd.Env, lifelineEnv+"="+strconv.Itoa(lifelineFD+len(cmd.ExtraFiles)-1))
	return w, r, nil
}

// watchLifeline makes a launched agent exit when its controller's end of the lifeline
// closes. An agent started without one (by hand, by an older controller) has nothing to
// watch.
func watchLifeline(exit func(code int)) {
	fd, err := strconv.Atoi(os.Getenv(lifelineEnv))
	if err != nil || fd < lifelineFD {
		return
	}
	// Its scripts and their children must not hold the lifeline open after the agent.
	syscall.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), "lifeline")
	go func() {
		// Nothing is ever written: the read returns only when the controller's end closes.
		_, _ = io.Copy(io.Discard, f)
		exit(LifelineExitCode)
	}()
}
