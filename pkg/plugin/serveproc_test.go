package plugin

import (
	"bufio"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ServeProcess is the test agent binary running in "serve" mode, exported to
// the external tests of this package.
type ServeProcess struct {
	// Addr is the address the process reported it listens on.
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	logs *syncBuffer
}

// StartServe runs the test agent as a remote agent on listen ("127.0.0.1:0"
// for any port) and returns once it reports its address. The process is
// killed when the test ends.
func StartServe(t testing.TB, f *RemoteFixture, listen string) *ServeProcess {
	t.Helper()
	cmd := exec.Command(filepath.Join(agentDir, testAgent), "serve", "--listen", listen,
		"--cert", f.ServerCert, "--key", f.ServerKey, "--client-ca", f.Client.CAFile)
	cmd.Env = append([]string(nil), agentEnv...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start serve: %v", err)
	}
	p := &ServeProcess{cmd: cmd, done: make(chan struct{}), logs: &syncBuffer{}}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "serving on "); ok {
				addr <- strings.Fields(rest)[0]
			}
			_, _ = p.logs.Write([]byte(line + "\n"))
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.Kill(t) })
	select {
	case p.Addr = <-addr:
		return p
	case <-p.done:
		t.Fatalf("serve exited before listening: %v\n%s", p.err, p.logs.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not report its address:\n%s", p.logs.String())
	}
	return nil
}

// PID is the process ID of the serving agent.
func (p *ServeProcess) PID() int { return p.cmd.Process.Pid }

// Logs is what the process wrote to stderr so far.
func (p *ServeProcess) Logs() string { return p.logs.String() }

// Kill SIGKILLs the process and waits for it.
func (p *ServeProcess) Kill(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) &&
		!strings.Contains(err.Error(), "process already finished") {
		t.Errorf("kill serve: %v", err)
	}
	p.wait(t)
}

// Stop sends SIGTERM and returns the exit error, nil for a clean exit.
func (p *ServeProcess) Stop(t testing.TB) error {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("sigterm serve: %v", err)
	}
	p.wait(t)
	return p.err
}

func (p *ServeProcess) wait(t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("serve process %d did not exit", p.PID())
	}
}
