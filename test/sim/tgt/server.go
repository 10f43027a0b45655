package tgt

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// installHint is in every error about missing tools so whoever runs the tests knows the fix.
const installHint = "apt-get install tgt libiscsi-bin"

// defaultStartTimeout bounds Start when ctx has no deadline.
const defaultStartTimeout = 15 * time.Second

// startAttempts is how often Start retries with new ports: the iSCSI port may be taken
// between probing and tgtd's bind, and the control port by another tgtd.
const startAttempts = 4

// commandTimeout bounds each tgtadm call the harness makes.
const commandTimeout = 10 * time.Second

// Options configure one tgtd.
type Options struct {
	// Dir holds the LUN backing files and tgtd's log. Required; a test passes t.TempDir().
	Dir string
}

// Server is one running tgtd serving iSCSI on 127.0.0.1.
type Server struct {
	dir      string
	port     int
	control  int
	cmd      *exec.Cmd
	done     chan struct{} // closed when tgtd has been reaped
	waitErr  error
	stopOnce sync.Once
	stopErr  error

	mu      sync.Mutex
	nextTID int
	tids    []int // targets created, for Stop
}

// Start runs `tgtd -f -C N --iscsi portal=127.0.0.1:PORT` in a process group of its own
// and returns once tgtadm reaches it and the portal accepts connections. ctx bounds the
// start only; the caller stops the server with Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if err := CheckTools(); err != nil {
		return nil, err
	}
	if opts.Dir == "" {
		return nil, errors.New("start tgtd: Dir is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("start tgtd: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start tgtd: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}
	var errs []error
	for attempt := 0; attempt < startAttempts && ctx.Err() == nil; attempt++ {
		s, err := startOnce(ctx, dir)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("start tgtd in %s: %w", dir, errors.Join(append(errs, ctx.Err())...))
}

// CheckTools reports a missing tgtd, tgtadm or libiscsi initiator with the install hint.
func CheckTools() error {
	for _, tool := range []string{"tgtd", "tgtadm", "iscsi-readcapacity16", "iscsi-perf"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (%w): %s", tool, err, installHint)
		}
	}
	return nil
}

func startOnce(ctx context.Context, dir string) (*Server, error) {
	port, err := freeTCPPort()
	if err != nil {
		return nil, err
	}
	// Control ports name unix sockets under /run/tgtd; a random one rarely collides, and
	// a collision makes tgtd exit at once ("another tgtd is using"), so Start retries.
	// tgtd refuses control ports above 32767 ("-C argument value out of range").
	control := 1000 + rand.IntN(31000)
	logf, err := os.OpenFile(filepath.Join(dir, "tgtd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open tgtd log: %w", err)
	}
	defer logf.Close() // the child keeps its own descriptor
	cmd := exec.Command("tgtd", "-f", "-C", strconv.Itoa(control),
		"--iscsi", fmt.Sprintf("portal=127.0.0.1:%d", port))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig kills tgtd if the test binary dies without running its cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run tgtd: %w", err)
	}
	s := &Server{dir: dir, port: port, control: control, cmd: cmd, done: make(chan struct{}), nextTID: 1}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(ctx); err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("port %d control %d: %w (log: %s)", port, control, err, s.logTail())
	}
	return s, nil
}

// waitReady polls tgtadm and the portal until both answer, tgtd exits or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if _, last = s.Tgtadm(ctx, "--op", "show", "--mode", "system"); last == nil {
			var conn net.Conn
			if conn, last = (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", s.Portal()); last == nil {
				conn.Close()
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("tgtd exited: %v", s.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("tgtd not ready before deadline: %w", errors.Join(ctx.Err(), last))
		case <-tick.C:
		}
	}
}

// Tgtadm runs tgtadm against this tgtd with the given arguments after -C N --lld iscsi.
func (s *Server) Tgtadm(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	full := append([]string{"-C", strconv.Itoa(s.control), "--lld", "iscsi"}, args...)
	cmd := exec.CommandContext(ctx, "tgtadm", full...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("tgtadm %v: %w: %s", args, err, out)
	}
	return string(out), nil
}

// Stop removes every target (LUNs first), shuts tgtd down with `--op delete --mode
// system` (it ignores SIGTERM), kills its process group if it is still alive and waits
// for it. Calling it again returns the first result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *Server) stop() error {
	var errs []error
	if !s.exited() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*commandTimeout)
		defer cancel()
		s.mu.Lock()
		tids := append([]int(nil), s.tids...)
		s.mu.Unlock()
		for _, tid := range tids {
			id := strconv.Itoa(tid)
			_, _ = s.Tgtadm(ctx, "--op", "delete", "--mode", "logicalunit", "--tid", id, "--lun", "1")
			if _, err := s.Tgtadm(ctx, "--op", "delete", "--force", "--mode", "target", "--tid", id); err != nil {
				errs = append(errs, err)
			}
		}
		if _, err := s.Tgtadm(ctx, "--op", "delete", "--mode", "system"); err != nil {
			errs = append(errs, err)
		}
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
		}
	}
	pid := s.cmd.Process.Pid
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		errs = append(errs, fmt.Errorf("kill tgtd group %d: %w", pid, err))
	}
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		errs = append(errs, fmt.Errorf("tgtd %d did not exit after SIGKILL", pid))
	}
	// tgtd leaves its control socket and lock file behind; they are ours to remove.
	for _, suffix := range []string{"", ".lock"} {
		_ = os.Remove(fmt.Sprintf("/run/tgtd/socket.%d%s", s.control, suffix))
	}
	return errors.Join(errs...)
}

func (s *Server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Portal is the host:port tgtd serves iSCSI on.
func (s *Server) Portal() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// Port is the TCP port tgtd serves iSCSI on.
func (s *Server) Port() int { return s.port }

// ControlPort is the N of `tgtd -C N`, which tgtadm needs to reach this tgtd.
func (s *Server) ControlPort() int { return s.control }

// PID is the process ID of tgtd, also its process group ID.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Dir holds this server's LUN files and log.
func (s *Server) Dir() string { return s.dir }

func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "tgtd.log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free tcp port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
