package watchdog

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeKernel records the system calls Linux makes and answers them as a driver would,
// with GETTIMEOUT reporting got and the errors set.
type fakeKernel struct {
	calls           []string
	got             int
	openErr, setErr error
	getErr, feedErr error
}

func (k *fakeKernel) syscalls() *syscalls {
	return &syscalls{
		open: func(path string, mode int, _ uint32) (int, error) {
			k.calls = append(k.calls, fmt.Sprintf("open %s write-only=%t cloexec=%t", path, mode&unix.O_ACCMODE == unix.O_WRONLY, mode&unix.O_CLOEXEC != 0))
			return 7, k.openErr
		},
		setInt: func(fd int, req uint, v int) error {
			k.calls = append(k.calls, fmt.Sprintf("ioctl %d %#x %d", fd, req, v))
			return k.setErr
		},
		getInt: func(fd int, req uint) (int, error) {
			k.calls = append(k.calls, fmt.Sprintf("ioctl %d %#x", fd, req))
			return k.got, k.getErr
		},
		feed: func(fd int) error {
			k.calls = append(k.calls, fmt.Sprintf("keepalive %d", fd))
			return k.feedErr
		},
		write: func(fd int, p []byte) (int, error) {
			k.calls = append(k.calls, fmt.Sprintf("write %d %q", fd, p))
			return len(p), nil
		},
		close: func(fd int) error {
			k.calls = append(k.calls, fmt.Sprintf("close %d", fd))
			return nil
		},
	}
}

// TestLinux: the kernel watchdog API at the system-call boundary. The request numbers are
// the kernel's (include/uapi/linux/watchdog.h): SETTIMEOUT _IOWR('W', 6, int) = 0xc0045706,
// GETTIMEOUT _IOR('W', 7, int) = 0x80045707.
func TestLinux(t *testing.T) {
	open := "open /dev/watchdog1 write-only=true cloexec=true"
	magicClose := []string{`write 7 "V"`, "close 7"}
	for name, tc := range map[string]struct {
		timeout time.Duration
		kernel  fakeKernel
		want    time.Duration
		err     string
		calls   []string
	}{
		"armed, the driver rounds up": {timeout: 5 * time.Second, kernel: fakeKernel{got: 6}, want: 6 * time.Second,
			calls: []string{open, "ioctl 7 0xc0045706 5", "ioctl 7 0x80045707"}},
		"a fraction of a second rounds up": {timeout: 1500 * time.Millisecond, kernel: fakeKernel{got: 2}, want: 2 * time.Second,
			calls: []string{open, "ioctl 7 0xc0045706 2", "ioctl 7 0x80045707"}},
		"under a second is refused before opening": {timeout: 500 * time.Millisecond,
			err: "watchdog /dev/watchdog1: watchdog timeout 500ms: under the 1s"},
		"no device": {timeout: 5 * time.Second, kernel: fakeKernel{openErr: unix.ENOENT},
			err: "watchdog /dev/watchdog1: open: no such file", calls: []string{open}},
		"a timeout the driver refuses stops the device again": {timeout: 5 * time.Second, kernel: fakeKernel{setErr: unix.EINVAL},
			err: "watchdog /dev/watchdog1: set timeout 5s: invalid argument", calls: append([]string{open, "ioctl 7 0xc0045706 5"}, magicClose...)},
		"an unreadable timeout stops the device again": {timeout: 5 * time.Second, kernel: fakeKernel{getErr: unix.ENOTTY},
			err: "watchdog /dev/watchdog1: read timeout back", calls: append([]string{open, "ioctl 7 0xc0045706 5", "ioctl 7 0x80045707"}, magicClose...)},
		"a zero timeout read back stops the device again": {timeout: 5 * time.Second, kernel: fakeKernel{got: 0},
			err: "reports a timeout of 0s", calls: append([]string{open, "ioctl 7 0xc0045706 5", "ioctl 7 0x80045707"}, magicClose...)},
	} {
		t.Run(name, func(t *testing.T) {
			k := tc.kernel
			l := &Linux{Path: "/dev/watchdog1", sys: k.syscalls()}
			got, err := l.Arm(tc.timeout)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Arm: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Arm: error %v, want one containing %q", err, tc.err)
			case got != tc.want:
				t.Errorf("Arm: %s, want %s", got, tc.want)
			}
			if strings.Join(k.calls, "\n") != strings.Join(tc.calls, "\n") {
				t.Errorf("system calls:\n\t%s\nwant:\n\t%s", strings.Join(k.calls, "\n\t"), strings.Join(tc.calls, "\n\t"))
			}
		})
	}
}

// TestLinuxFeedAndDisarm: a feed is a WDIOC_KEEPALIVE on the open device; a disarm is the
// magic close, once.
func TestLinuxFeedAndDisarm(t *testing.T) {
	k := &fakeKernel{got: 5}
	l := &Linux{Path: "/dev/watchdog", sys: k.syscalls()}
	if err := l.Feed(); err == nil || !strings.Contains(err.Error(), "watchdog /dev/watchdog: not armed") {
		t.Errorf("Feed before Arm: %v", err)
	}
	if _, err := l.Arm(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Arm(5 * time.Second); err == nil {
		t.Error("a second Arm on an armed device succeeded")
	}
	k.calls = nil
	if err := l.Feed(); err != nil {
		t.Fatal(err)
	}
	k.feedErr = unix.EIO
	if err := l.Feed(); err == nil || !strings.Contains(err.Error(), "watchdog /dev/watchdog: keepalive: input/output error") {
		t.Errorf("a failed keepalive: %v", err)
	}
	for range 2 {
		if err := l.Disarm(); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"keepalive 7", "keepalive 7", `write 7 "V"`, "close 7"}
	if strings.Join(k.calls, ",") != strings.Join(want, ",") {
		t.Errorf("system calls %v, want %v", k.calls, want)
	}
}

func TestOpen(t *testing.T) {
	for path, want := range map[string]string{
		"/dev/watchdog":     "*watchdog.Linux /dev/watchdog",
		"unix:/run/wd.sock": "*watchdog.Socket /run/wd.sock",
		"unix:":             "error: watchdog device \"unix:\": no socket path after unix:",
		"":                  "error: watchdog device: no path",
	} {
		dev, err := Open(path)
		var got string
		switch d := dev.(type) {
		case *Linux:
			got = fmt.Sprintf("%T %s", d, d.Path)
		case *Socket:
			got = fmt.Sprintf("%T %s", d, d.Path)
		}
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != want {
			t.Errorf("Open(%q): %s, want %s", path, got, want)
		}
	}
}

// TestLinuxOnAFileThatIsNoWatchdog: the real system calls on /dev/null (never on a
// watchdog: one not fed resets the machine), as an agent given the wrong --watchdog
// meets them: the open works, the timeout is refused, and the error names the path and
// the step; the device is closed again.
func TestLinuxOnAFileThatIsNoWatchdog(t *testing.T) {
	dev, err := Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	_, err = dev.Arm(5 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "watchdog /dev/null: set timeout 5s") || !errors.Is(err, unix.ENOTTY) {
		t.Fatalf("Arm on /dev/null: %v, want the path, the step and ENOTTY", err)
	}
	if l := dev.(*Linux); l.open {
		t.Error("the device stayed open after a failed Arm")
	}
	if err := dev.Feed(); err == nil || !strings.Contains(err.Error(), "not armed") {
		t.Errorf("Feed after a failed Arm: %v", err)
	}
}
