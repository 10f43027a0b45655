package watchdog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// Kinds of watchdog, as the node agent reports them: only a device resets a machine.
const (
	KindDevice   = "device"
	KindEmulated = "emulated"
)

// KindOf says whether d is a device or an emulated watchdog.
func KindOf(d Device) string {
	if _, ok := d.(*Socket); ok {
		return KindEmulated
	}
	return KindDevice
}

// Stuck is a device that cannot be disarmed once armed (a Linux driver with nowayout).
type Stuck interface {
	// Nowayout is true once the device was opened and cannot be stopped again.
	Nowayout() bool
}

// CountingError is a failed Arm that left the device counting down: it was opened (which
// starts the countdown) and cannot be stopped again. Timeout is the countdown in force,
// zero when the driver would not say. Whoever armed it must feed it, or the machine
// resets, and must not count on it.
type CountingError struct {
	Err     error
	Timeout time.Duration
	// Inherited: the device was counting already when Arm opened it (an earlier agent
	// left it running, as it does for a node that is to be fenced): a failed Arm does
	// not stop what that agent started.
	Inherited bool
}

func (e *CountingError) Error() string {
	if e.Inherited {
		return e.Err.Error() + ": the device was counting down when opened (an earlier agent left it running) and is not stopped"
	}
	return e.Err.Error() + ": the device counts down anyway and cannot be stopped (nowayout)"
}

func (e *CountingError) Unwrap() error { return e.Err }

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
	stat    func(path string) (major, minor uint32, err error)
	open    func(path string, mode int, perm uint32) (int, error)
	support func(fd int) (uint32, error)
	setInt  func(fd int, req uint, value int) error
	getInt  func(fd int, req uint) (int, error)
	feed    func(fd int) error
	write   func(fd int, p []byte) (int, error)
	close   func(fd int) error
}

var kernel = syscalls{stat: statDevice, open: unix.Open, support: supportFlags, setInt: unix.IoctlSetPointerInt,
	getInt: unix.IoctlGetInt, feed: unix.IoctlWatchdogKeepalive, write: unix.Write, close: unix.Close}

// statDevice is the device numbers of the character device at path.
func statDevice(path string) (uint32, uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return 0, 0, errors.New("not a character device")
	}
	return unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), nil
}

// supportFlags is WDIOC_GETSUPPORT's options: what the driver can do.
func supportFlags(fd int) (uint32, error) {
	info, err := unix.IoctlGetWatchdogInfo(fd)
	if err != nil {
		return 0, err
	}
	return info.Options, nil
}

// Linux is a watchdog device of the Linux kernel's watchdog API: opening the device
// starts it, WDIOC_SETTIMEOUT sets the timeout and WDIOC_GETTIMEOUT reads back the one in
// force, WDIOC_KEEPALIVE feeds it, and writing 'V' before closing stops it (the "magic
// close").
//
// Two driver settings change that, and Arm reads both before it counts on the device. A
// driver with nowayout (CONFIG_WATCHDOG_NOWAYOUT, or its module's nowayout=1) never
// stops once opened: every stop of the agent (a DaemonSet rollout, an eviction) then
// resets the node unless the next agent opens the device within the timeout. Its state
// is in sysfs (watchdogN/nowayout, with the watchdog sysfs interface); Arm refuses such a
// device, and one whose state sysfs does not give, before opening it, unless
// AllowNowayout. A driver without WDIOF_MAGICCLOSE (WDIOC_GETSUPPORT) stops on any
// close, the agent's death included: a killed agent would then stop the countdown of a
// node it had stopped feeding. Arm refuses it unless the device is nowayout.
type Linux struct {
	Path string
	// AllowNowayout arms a device that cannot be stopped, or whose nowayout state sysfs
	// does not give.
	AllowNowayout bool
	// Sysfs is where sysfs is mounted; /sys when empty.
	Sysfs string
	sys   *syscalls
	fd    int
	open  bool
	// stuck: the open device cannot be stopped (nowayout, or not known otherwise).
	stuck bool
}

func (l *Linux) calls() *syscalls {
	if l.sys == nil {
		return &kernel
	}
	return l.sys
}

// Nowayout is true once the open device cannot be stopped again.
func (l *Linux) Nowayout() bool { return l.open && l.stuck }

// nowayout reads the device's nowayout state from sysfs: the legacy /dev/watchdog
// (misc 10:130) is watchdog0's, any other device its own, found by its numbers. known
// is false when sysfs does not say (no such file: a kernel without the watchdog sysfs
// interface, or no watchdog at all).
func (l *Linux) nowayout() (stuck, known bool, where string) {
	major, minor, err := l.calls().stat(l.Path)
	if err != nil {
		return true, false, fmt.Sprintf("device numbers of %s: %v", l.Path, err)
	}
	root := l.Sysfs
	if root == "" {
		root = "/sys"
	}
	where = filepath.Join(root, "dev", "char", fmt.Sprintf("%d:%d", major, minor), "nowayout")
	if major == 10 && minor == 130 {
		where = filepath.Join(root, "class", "watchdog", "watchdog0", "nowayout")
	}
	b, err := os.ReadFile(where)
	if err != nil {
		return true, false, where
	}
	switch strings.TrimSpace(string(b)) {
	case "0":
		return false, true, where
	case "1":
		return true, true, where
	}
	return true, false, where
}

// Arm reads the device's nowayout state, opens it, checks that its driver supports the
// magic close and sets its timeout. A device it opened but could not set up is stopped
// again before Arm returns; one that cannot be stopped is left open and counting, and
// the error says so (CountingError): its owner feeds it, so that a failed Arm does not
// reset the node at every boot, and never counts on it.
func (l *Linux) Arm(timeout time.Duration) (time.Duration, error) {
	if l.open {
		return 0, fmt.Errorf("watchdog %s: already armed", l.Path)
	}
	secs, err := seconds(timeout)
	if err != nil {
		return 0, fmt.Errorf("watchdog %s: %w", l.Path, err)
	}
	stuck, known, where := l.nowayout()
	switch {
	case stuck && known && !l.AllowNowayout:
		return 0, fmt.Errorf("watchdog %s: nowayout (%s is 1): once opened it never stops, and every stop of the agent resets the node unless the next agent opens it within the timeout; refused unless nowayout is allowed (--watchdog-allow-nowayout)", l.Path, where)
	case !known && !l.AllowNowayout:
		return 0, fmt.Errorf("watchdog %s: its nowayout state is unknown (no %s): it may never stop once opened; refused unless nowayout is allowed (--watchdog-allow-nowayout)", l.Path, where)
	}
	// Read before the open, which would start a stopped device too.
	inherited := counting(where)
	sys := l.calls()
	fd, err := sys.open(l.Path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("watchdog %s: open: %w", l.Path, err)
	}
	l.fd, l.open, l.stuck = fd, true, stuck
	got, err := l.setUp(secs)
	if err == nil {
		return got, nil
	}
	if l.stuck || inherited {
		// It counts down and cannot, or must not, be stopped: what it counts, for its
		// owner to feed it in time while the node may live, and not after.
		t, _ := sys.getInt(fd, unix.WDIOC_GETTIMEOUT)
		return 0, &CountingError{Err: err, Timeout: time.Duration(max(t, 0)) * time.Second, Inherited: inherited && !l.stuck}
	}
	if derr := l.Disarm(); derr != nil {
		err = errors.Join(err, derr)
	}
	return 0, err
}

// counting reports whether the device whose sysfs nowayout file is at where was counting
// down already: its "state" beside it reads "active". A state sysfs does not give counts
// as not counting, as before the attribute existed.
func counting(where string) bool {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(where), "state"))
	return err == nil && strings.TrimSpace(string(b)) == "active"
}

// setUp checks the open device's support for the magic close and sets its timeout.
func (l *Linux) setUp(secs int) (time.Duration, error) {
	sys := l.calls()
	flags, err := sys.support(l.fd)
	if err != nil {
		return 0, fmt.Errorf("watchdog %s: read the driver's support flags (WDIOC_GETSUPPORT): %w", l.Path, err)
	}
	if flags&unix.WDIOF_MAGICCLOSE == 0 && !l.stuck {
		return 0, fmt.Errorf("watchdog %s: the driver does not support the magic close (WDIOF_MAGICCLOSE): any close stops it, the agent's death included, so a node that stopped feeding could live on", l.Path)
	}
	if err := sys.setInt(l.fd, unix.WDIOC_SETTIMEOUT, secs); err != nil {
		return 0, fmt.Errorf("watchdog %s: set timeout %ds: %w", l.Path, secs, err)
	}
	got, err := sys.getInt(l.fd, unix.WDIOC_GETTIMEOUT)
	if err != nil {
		return 0, fmt.Errorf("watchdog %s: read timeout back: %w", l.Path, err)
	}
	if got <= 0 {
		return 0, fmt.Errorf("watchdog %s: the driver reports a timeout of %ds", l.Path, got)
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

// Disarm writes the magic 'V' and closes the device; a nowayout device counts on.
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
