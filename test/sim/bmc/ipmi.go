package bmc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// installHint is in every error about missing tools so whoever runs the tests knows the fix.
const installHint = "apt-get install openipmi ipmitool"

// defaultStartTimeout bounds StartIPMI when ctx has no deadline.
const defaultStartTimeout = 15 * time.Second

// startAttempts is how often StartIPMI retries with a new port: the free port it picks
// may be taken by another process between probing and ipmi_sim's bind.
const startAttempts = 3

// IPMIOptions configure one simulated BMC.
type IPMIOptions struct {
	// Dir holds the configuration, state and logs of this BMC. Required; a test passes t.TempDir().
	Dir string
	// User and Password are the BMC's admin credentials; "admin"/"secret" when empty.
	User, Password string
	// PoweredOn is the initial chassis power state when Dir has none yet.
	PoweredOn bool
	// IgnorePowerOff makes a broken BMC: it acknowledges "power off" but leaves power on.
	IgnorePowerOff bool
	// OffDelay makes a slow BMC: it acknowledges "power off" at once (logged as
	// off-requested) and cuts power after this delay (logged as off).
	OffDelay time.Duration
	// Address is the IPv4 address the BMC listens on; default 127.0.0.1.
	Address string
	// OffHook, if set, is an executable the BMC runs (without arguments) when it cuts
	// power, before it records the power off: a real node's power supply.
	OffHook string
	// GUID is the system GUID the BMC answers Get System GUID with: 32 hex digits (dashes
	// allowed, as GUID() gives them), in the order the BMC sends them. Empty: the one a
	// previous run in Dir kept, else random.
	GUID string
}

// IPMISim is one running ipmi_sim process serving a BMC on 127.0.0.1.
type IPMISim struct {
	opts     IPMIOptions
	port     int
	cmd      *exec.Cmd
	done     chan struct{} // closed when the ipmi_sim process has been reaped
	waitErr  error
	stopOnce sync.Once
	mu       sync.Mutex // serialises SetPower's read-modify-write of the power file
}

// StartIPMI starts ipmi_sim on a free UDP port of 127.0.0.1 and returns once the BMC
// answers "power status" over lanplus. ctx bounds the start only, not the sim's life:
// the caller stops it with Stop.
func StartIPMI(ctx context.Context, opts IPMIOptions) (*IPMISim, error) {
	if err := checkTools(); err != nil {
		return nil, err
	}
	if opts.Dir == "" {
		return nil, errors.New("start ipmi sim: Dir is required")
	}
	// lan.conf names the chassis script by absolute path, and ipmi_sim splits that
	// command line on spaces.
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("start ipmi sim: %w", err)
	}
	if strings.ContainsAny(dir, " \t\n\"\\") {
		return nil, fmt.Errorf("start ipmi sim: Dir %q contains a space, quote or backslash", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start ipmi sim: %w", err)
	}
	opts.Dir = dir
	if opts.Address == "" {
		opts.Address = "127.0.0.1"
	}
	if net.ParseIP(opts.Address).To4() == nil {
		return nil, fmt.Errorf("start ipmi sim: Address %q is not an IPv4 address", opts.Address)
	}
	if strings.ContainsAny(opts.OffHook, " \t\n\"\\$`") {
		return nil, fmt.Errorf("start ipmi sim: OffHook %q contains a space, quote or shell character", opts.OffHook)
	}
	if opts.User == "" {
		opts.User = "admin"
	}
	if opts.Password == "" {
		opts.Password = "secret"
	}
	if err := checkCredentials(opts.User, opts.Password); err != nil {
		return nil, fmt.Errorf("start ipmi sim: %w", err)
	}
	if err := initPower(opts.Dir, opts.PoweredOn); err != nil {
		return nil, fmt.Errorf("start ipmi sim: %w", err)
	}
	if opts.GUID, err = keepGUID(opts.Dir, opts.GUID); err != nil {
		return nil, fmt.Errorf("start ipmi sim: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}
	var errs []error
	for attempt := 0; attempt < startAttempts; attempt++ {
		sim, err := startOnce(ctx, opts)
		if err == nil {
			return sim, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("start ipmi sim in %s: %w", opts.Dir, errors.Join(errs...))
}

func checkTools() error {
	for _, tool := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (%w): %s", tool, err, installHint)
		}
	}
	return nil
}

// startOnce starts ipmi_sim on one port and waits until it answers or exits.
func startOnce(ctx context.Context, opts IPMIOptions) (*IPMISim, error) {
	port, err := freeUDPPort(opts.Address)
	if err != nil {
		return nil, err
	}
	if err := writeConfig(opts, port); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(opts.Dir, simLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open sim log: %w", err)
	}
	defer logf.Close() // the child keeps its own descriptor
	cmd := exec.Command("ipmi_sim",
		"-c", filepath.Join(opts.Dir, lanConfFile),
		"-f", filepath.Join(opts.Dir, emuFile),
		"-s", filepath.Join(opts.Dir, stateDir),
		"-n")
	cmd.Dir = opts.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// A process group of its own lets Stop kill ipmi_sim and any chassis script it runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run ipmi_sim: %w", err)
	}
	s := &IPMISim{opts: opts, port: port, cmd: cmd, done: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(ctx); err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("port %d: %w (log: %s)", port, err, s.logTail())
	}
	return s, nil
}

// waitReady polls "power status" until the BMC answers, ipmi_sim exits or ctx ends.
func (s *IPMISim) waitReady(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		callCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, last = s.ipmitool(callCtx, "power", "status")
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("ipmi_sim exited: %v", s.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("bmc did not answer before deadline: %w", errors.Join(ctx.Err(), last))
		case <-tick.C:
		}
	}
}

// ipmitool runs one ipmitool command against this BMC, password from a file.
func (s *IPMISim) ipmitool(ctx context.Context, args ...string) (string, error) {
	base := []string{"-I", "lanplus", "-C", "3", "-H", s.Host(), "-p", strconv.Itoa(s.port),
		"-U", s.opts.User, "-f", filepath.Join(s.opts.Dir, passwordFile), "-N", "1", "-R", "1"}
	cmd := exec.CommandContext(ctx, "ipmitool", append(base, args...)...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ipmitool %v: %w: %s", args, err, out)
	}
	return string(out), nil
}

// Stop kills ipmi_sim and everything in its process group and waits for it. Calling
// it again returns the first result.
func (s *IPMISim) Stop() error {
	var err error
	s.stopOnce.Do(func() {
		pid := s.cmd.Process.Pid
		// SIGKILL, not SIGTERM: the state that matters lives in files, and a test must
		// not wait on a shutdown path.
		if kerr := syscall.Kill(-pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			err = fmt.Errorf("kill ipmi_sim group %d: %w", pid, kerr)
		}
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			err = errors.Join(err, fmt.Errorf("ipmi_sim %d did not exit after SIGKILL", pid))
		}
	})
	return err
}

// Host is the address the BMC listens on.
func (s *IPMISim) Host() string { return s.opts.Address }

// Port is the UDP port the BMC listens on.
func (s *IPMISim) Port() int { return s.port }

// User is the BMC admin user name.
func (s *IPMISim) User() string { return s.opts.User }

// Password is the BMC admin password.
func (s *IPMISim) Password() string { return s.opts.Password }

// PID is the process ID of ipmi_sim, also its process group ID.
func (s *IPMISim) PID() int { return s.cmd.Process.Pid }

// Dir is the directory holding this BMC's configuration, state and logs.
func (s *IPMISim) Dir() string { return s.opts.Dir }

// GUID is the system GUID the BMC sends, as a UUID in the order it sends the bytes.
func (s *IPMISim) GUID() string { return uuidText(s.opts.GUID, false) }

// SystemUUID is the BMC's GUID as the machine behind it would report it to its kubelet
// (status.nodeInfo.systemUUID): read from SMBIOS, whose first three fields are
// little-endian, in upper case like dmidecode.
func (s *IPMISim) SystemUUID() string { return strings.ToUpper(uuidText(s.opts.GUID, true)) }

// freeUDPPort asks the kernel for a free UDP port on addr and releases it.
func freeUDPPort(addr string) (int, error) {
	conn, err := net.ListenPacket("udp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("find free udp port: %w", err)
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).Port, nil
}

// logTail returns the end of ipmi_sim's own output, for start errors.
func (s *IPMISim) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.opts.Dir, simLogFile))
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
