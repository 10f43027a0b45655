package tgt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// URL is the libiscsi URL of LUN 1 of target on this server.
func (s *Server) URL(target string) string {
	return fmt.Sprintf("iscsi://%s/%s/1", s.Portal(), target)
}

// Login logs in as initiator to LUN 1 of target with libiscsi's iscsi-readcapacity16,
// reads the capacity and logs out. A refused login is an error carrying the tool's output
// ("Target not found" when no ACL admits the initiator).
func (s *Server) Login(ctx context.Context, initiator, target string) error {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "iscsi-readcapacity16", "-i", initiator, s.URL(target))
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("login %s to %s: %w: %s", initiator, target, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// IOLoop is a running libiscsi iscsi-perf: one session that reads LUN 1 in a loop until
// it is stopped or the session breaks. It is started with no reconnects allowed, so a
// session the target closes makes it exit with an error.
type IOLoop struct {
	cmd     *exec.Cmd
	done    chan struct{}
	mu      sync.Mutex
	out     bytes.Buffer
	waitErr error
	once    sync.Once
}

// StartIO starts an I/O loop as initiator against LUN 1 of target.
func (s *Server) StartIO(initiator, target string) (*IOLoop, error) {
	l := &IOLoop{done: make(chan struct{})}
	// -m 1 -b 64: one 32 KiB read at a time keeps the loop light on a small machine;
	// -x 0: a dropped session ends the loop instead of being reconnected.
	l.cmd = exec.Command("iscsi-perf", "-i", initiator, "-m", "1", "-b", "64", "-x", "0", s.URL(target))
	l.cmd.Stdout, l.cmd.Stderr = (*lockedWriter)(l), (*lockedWriter)(l)
	l.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := l.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start io loop %s on %s: %w", initiator, target, err)
	}
	go func() {
		err := l.cmd.Wait()
		l.mu.Lock()
		l.waitErr = err
		l.mu.Unlock()
		close(l.done)
	}()
	return l, nil
}

type lockedWriter IOLoop

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.Write(p)
}

// WaitConnected returns once the loop has logged in and started reading, or fails if it
// exits first or ctx ends.
func (l *IOLoop) WaitConnected(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if strings.Contains(l.Output(), "connected to") {
			return nil
		}
		select {
		case <-l.done:
			return fmt.Errorf("io loop exited before connecting: %v: %s", l.Err(), l.Output())
		case <-ctx.Done():
			return fmt.Errorf("io loop not connected: %w: %s", ctx.Err(), l.Output())
		case <-tick.C:
		}
	}
}

// Done is closed when the loop has exited.
func (l *IOLoop) Done() <-chan struct{} { return l.done }

// Err is how the loop exited; nil while it runs.
func (l *IOLoop) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waitErr
}

// Output is what the loop printed so far.
func (l *IOLoop) Output() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.out.String()
}

// Stop kills the loop's process group and waits for it.
func (l *IOLoop) Stop() error {
	var err error
	l.once.Do(func() {
		pid := l.cmd.Process.Pid
		if kerr := syscall.Kill(-pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			err = fmt.Errorf("kill io loop %d: %w", pid, kerr)
		}
		select {
		case <-l.done:
		case <-time.After(10 * time.Second):
			err = errors.Join(err, fmt.Errorf("io loop %d did not exit", pid))
		}
	})
	return err
}
