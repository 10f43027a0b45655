package reap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// clearRounds bounds the kill-and-reap rounds; each round kills every child there is,
// so only a process tree that keeps forking faster than SIGKILL lands needs more than a
// few.
const clearRounds = 200

// reaper runs name with args as its child, in a process group of its own, and returns
// the exit status to exit with once every descendant is gone.
func reaper(name string, args []string) int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "reap: set child subreaper: %v\n", err)
		return 126
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	cmd := exec.Command(name, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "reap: start %s: %v\n", name, err)
		return 127
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var waitErr error
	select {
	case waitErr = <-done:
	case sig := <-stop:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		clear(cmd.Process.Pid)
		fmt.Fprintf(os.Stderr, "reap: %s stopped by %s\n", filepath.Base(name), sig)
		return 128 + int(sig.(syscall.Signal))
	}
	clear(cmd.Process.Pid)
	return exitStatus(waitErr)
}

// clear kills the command's process group and then every child of this process (the
// subreaper inherits each orphaned descendant), reaping them, until none is left.
func clear(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	for range clearRounds {
		kids := children()
		if len(kids) == 0 {
			return
		}
		for _, pid := range kids {
			// Its own group too: a descendant that called setpgid leads one.
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		reapAll()
	}
}

// reapAll waits for every child that has exited, without blocking on live ones, and
// then for those just killed.
func reapAll() {
	deadline := time.Now().Add(time.Second)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.ECHILD):
			return
		case err != nil, pid == 0:
			if time.Now().After(deadline) {
				return
			}
			time.Sleep(time.Millisecond) // a SIGKILLed child is reaped within a scheduling tick
		}
	}
}

// children lists the processes whose parent is this one.
func children() []int {
	self := strconv.Itoa(os.Getpid())
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		if f := strings.Fields(rest); len(f) > 1 && f[1] == self {
			out = append(out, pid)
		}
	}
	return out
}

// exitStatus is the reaper's exit status for the command's: its exit code, or
// 128+signal when a signal killed it, as a shell reports it.
func exitStatus(err error) int {
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		if err != nil {
			return 126
		}
		return 0
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return exitErr.ExitCode()
}
