package watchdog

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Device is a watchdog the node agent arms once and then feeds.
type Device interface {
	// Arm starts the countdown at timeout and returns the timeout in force: drivers
	// round to what their hardware counts and clamp to its range, and whoever waits for
	// the machine to have reset must wait on the real one.
	Arm(timeout time.Duration) (time.Duration, error)
	// Feed starts the countdown again.
	Feed() error
	// Disarm stops the countdown and releases the device. It is for a shutdown someone
	// asked for, never for one after fencing began.
	Disarm() error
}

// Open returns the device at path: "unix:" and a socket path for an emulated watchdog
// (Emulator), any other path for a Linux watchdog device such as /dev/watchdog.
func Open(path string) (Device, error) {
	if sock, ok := strings.CutPrefix(path, "unix:"); ok {
		if sock == "" {
			return nil, fmt.Errorf("watchdog device %q: no socket path after unix:", path)
		}
		return &Socket{Path: sock}, nil
	}
	if path == "" {
		return nil, errors.New("watchdog device: no path")
	}
	return &Linux{Path: path}, nil
}

// seconds is timeout in the whole seconds the kernel interface counts, rounded up.
func seconds(timeout time.Duration) (int, error) {
	if timeout < time.Second {
		return 0, fmt.Errorf("watchdog timeout %s: under the 1s the kernel interface counts", timeout)
	}
	return int((timeout + time.Second - 1) / time.Second), nil
}

// syscalls are the system calls Linux makes, replaced in tests: a test never opens a
// real watchdog.
type syscalls struct {
	open   func(path string, mode int, perm uint32) (int, error)
	setInt func(fd int, req uint, value int) error
	getInt func(fd int, req uint) (int, error)
	feed   func(fd int) error
	write  func(fd int, p []byte) (int, error)
	close  func(fd int) error
}

var kernel = syscalls{open: unix.Open, setInt: unix.IoctlSetPointerInt, getInt: unix.IoctlGetInt,
	feed: unix.IoctlWatchdogKeepalive, write: unix.Write, close: unix.Close}

// Linux is a watchdog device of the Linux kernel's watchdog API: opening the device
// starts it, WDIOC_SETTIMEOUT sets the timeout and WDIOC_GETTIMEOUT reads back the one in
// force, WDIOC_KEEPALIVE feeds it, and writing 'V' before closing stops it (the "magic
// close"; a driver built with nowayout keeps counting even then).
type Linux struct {
	Path string
	sys  *syscalls
	fd   int
	open bool
}

func (l *Linux) calls() *syscalls {
	if l.sys == nil {
		return &kernel
	}
	return l.sys
}

// Arm opens the device and sets its timeout. A device it opened but could not set up is
// stopped again before Arm returns, so that a failed Arm never leaves a countdown running
// that nobody feeds.
func (l *Linux) Arm(timeout time.Duration) (time.Duration, error) {
	if l.open {
		return 0, fmt.Errorf("watchdog %s: already armed", l.Path)
	}
	secs, err := seconds(timeout)
	if err != nil {
		return 0, fmt.Errorf("watchdog %s: %w", l.Path, err)
	}
	sys := l.calls()
	fd, err := sys.open(l.Path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("watchdog %s: open: %w", l.Path, err)
	}
	l.fd, l.open = fd, true
	fail := func(err error) (time.Duration, error) {
		if derr := l.Disarm(); derr != nil {
			err = errors.Join(err, derr)
		}
		return 0, err
	}
	if err := sys.setInt(fd, unix.WDIOC_SETTIMEOUT, secs); err != nil {
		return fail(fmt.Errorf("watchdog %s: set timeout %ds: %w", l.Path, secs, err))
	}
	got, err := sys.getInt(fd, unix.WDIOC_GETTIMEOUT)
	if err != nil {
		return fail(fmt.Errorf("watchdog %s: read timeout back: %w", l.Path, err))
	}
	if got <= 0 {
		return fail(fmt.Errorf("watchdog %s: the driver reports a timeout of %ds", l.Path, got))
	}
	return time.Duration(got) * time.Second, nil
}

// Feed starts the countdown again.
func (l *Linux) Feed() error {
	if !l.open {
		return fmt.Errorf("watchdog %s: not armed", l.Path)
	}
	if err := l.calls().feed(l.fd); err != nil {
		return fmt.Errorf("watchdog %s: keepalive: %w", l.Path, err)
	}
	return nil
}

// Disarm writes the magic 'V' and closes the device.
func (l *Linux) Disarm() error {
	if !l.open {
		return nil
	}
	sys := l.calls()
	var errs []error
	if _, err := sys.write(l.fd, []byte("V")); err != nil {
		errs = append(errs, fmt.Errorf("watchdog %s: magic close: %w", l.Path, err))
	}
	if err := sys.close(l.fd); err != nil {
		errs = append(errs, fmt.Errorf("watchdog %s: close: %w", l.Path, err))
	}
	l.open = false
	return errors.Join(errs...)
}
