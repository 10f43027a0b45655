package watchdog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeKernel records the system calls Linux makes and answers them as a driver would:
// the device is 10:130 (the legacy /dev/watchdog) unless numbers say otherwise,
// GETSUPPORT reports flags (the magic close unless noMagic), GETTIMEOUT reports got,
// and the errors set.
type fakeKernel struct {
	calls           []string
	got             int
	noMagic         bool
	numbers         [2]uint32
	statErr         error
	openErr, setErr error
	getErr, feedErr error
	supportErr      error
}

func (k *fakeKernel) syscalls() *syscalls {
	return &syscalls{
		stat: func(string) (uint32, uint32, error) {
			if k.numbers == [2]uint32{} {
				return 10, 130, k.statErr
			}
			return k.numbers[0], k.numbers[1], k.statErr
		},
		open: func(path string, mode int, _ uint32) (int, error) {
			k.calls = append(k.calls, fmt.Sprintf("open %s write-only=%t cloexec=%t", path, mode&unix.O_ACCMODE == unix.O_WRONLY, mode&unix.O_CLOEXEC != 0))
			return 7, k.openErr
		},
		support: func(fd int) (uint32, error) {
			k.calls = append(k.calls, fmt.Sprintf("ioctl %d %#x", fd, unix.WDIOC_GETSUPPORT))
			if k.noMagic {
				return unix.WDIOF_SETTIMEOUT | unix.WDIOF_KEEPALIVEPING, k.supportErr
			}
			return unix.WDIOF_SETTIMEOUT | unix.WDIOF_KEEPALIVEPING | unix.WDIOF_MAGICCLOSE, k.supportErr
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

// fakeSysfs is a sysfs with nowayout for watchdog0 (the legacy /dev/watchdog, 10:130)
// and for the device 250:1; "" leaves the file out.
func fakeSysfs(t *testing.T, watchdog0, dev250 string) string {
	t.Helper()
	root := t.TempDir()
	for dir, v := range map[string]string{"class/watchdog/watchdog0": watchdog0, "dev/char/250:1": dev250} {
		if v == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, "nowayout"), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestLinux: the kernel watchdog API at the system-call boundary, after the nowayout
// state read from sysfs. The request numbers are the kernel's
// (include/uapi/linux/watchdog.h): GETSUPPORT _IOR('W', 0, struct watchdog_info) =
// 0x80285700, SETTIMEOUT _IOWR('W', 6, int) = 0xc0045706, GETTIMEOUT _IOR('W', 7, int) =
// 0x80045707.
func TestLinux(t *testing.T) {
	open := "open /dev/watchdog1 write-only=true cloexec=true"
	support := "ioctl 7 0x80285700"
	magicClose := []string{`write 7 "V"`, "close 7"}
	for name, tc := range map[string]struct {
		timeout       time.Duration
		kernel        fakeKernel
		nowayout      string // watchdog0's; "" for no sysfs file
		allowNowayout bool
		want          time.Duration
		err           string
		counting      time.Duration // a CountingError with this timeout
		calls         []string
	}{
		"armed, the driver rounds up": {timeout: 5 * time.Second, kernel: fakeKernel{got: 6}, nowayout: "0", want: 6 * time.Second,
			calls: []string{open, support, "ioctl 7 0xc0045706 5", "ioctl 7 0x80045707"}},
		"a fraction of a second rounds up": {timeout: 1500 * time.Millisecond, kernel: fakeKernel{got: 2}, nowayout: "0", want: 2 * time.Second,
			calls: []string{open, support, "ioctl 7 0xc0045706 2", "ioctl 7 0x80045707"}},
		"under a second is refused before opening": {timeout: 500 * time.Millisecond, nowayout: "0",
			err: "watchdog /dev/watchdog1: watchdog timeout 500ms: under the 1s"},
		"no device": {timeout: 5 * time.Second, kernel: fakeKernel{openErr: unix.ENOENT}, nowayout: "0",
			err: "watchdog /dev/watchdog1: open: no such file", calls: []string{open}},
		"a timeout the driver refuses stops the device again": {timeout: 5 * time.Second, kernel: fakeKernel{setErr: unix.EINVAL}, nowayout: "0",
			err: "watchdog /dev/watchdog1: set timeout 5s: invalid argument", calls: append([]string{open, support, "ioctl 7 0xc0045706 5"}, magicClose...)},
		"an unreadable timeout stops the device again": {timeout: 5 * time.Second, kernel: fakeKernel{getErr: unix.ENOTTY}, nowayout: "0",
			err: "watchdog /dev/watchdog1: read timeout back", calls: append([]string{open, support, "ioctl 7 0xc0045706 5", "ioctl 7 0x80045707"}, magicClose...)},
		"a zero timeout read back stops the device again": {timeout: 5 * time.Second, kernel: fakeKernel{got: 0}, nowayout: "0",
			err: "reports a timeout of 0s", calls: append([]string{open, support, "ioctl 7 0xc0045706 5", "ioctl 7 0x80045707"}, magicClose...)},
		"nowayout is refused before opening": {timeout: 5 * time.Second, nowayout: "1",
			err: "watchdog /dev/watchdog1: nowayout (SYSFS/class/watchdog/watchdog0/nowayout is 1): once opened it never stops"},
		"an unknown nowayout state is refused before opening": {timeout: 5 * time.Second,
			err: "watchdog /dev/watchdog1: its nowayout state is unknown (no SYSFS/class/watchdog/watchdog0/nowayout)"},
		"no device numbers is refused before opening": {timeout: 5 * time.Second, kernel: fakeKernel{statErr: unix.ENOENT}, nowayout: "0",
			err: "nowayout state is unknown (no device numbers of /dev/watchdog1: no such file"},
		"nowayout, allowed": {timeout: 5 * time.Second, kernel: fakeKernel{got: 5}, nowayout: "1", allowNowayout: true, want: 5 * time.Second,
			calls: []string{open, support, "ioctl 7 0xc0045706 5", "ioctl 7 0x80045707"}},
		"no magic close is refused, and stopped by the close": {timeout: 5 * time.Second, kernel: fakeKernel{noMagic: true}, nowayout: "0",
			err: "does not support the magic close (WDIOF_MAGICCLOSE): any close stops it, the agent's death included", calls: append([]string{open, support}, magicClose...)},
		"no magic close on a nowayout device: death stops it no more than a close": {timeout: 5 * time.Second, kernel: fakeKernel{noMagic: true, got: 5},
			nowayout: "1", allowNowayout: true, want: 5 * time.Second, calls: []string{open, support, "ioctl 7 0xc0045706 5", "ioctl 7 0x80045707"}},
		"a refused timeout on a nowayout device is left counting, at the driver's timeout": {timeout: 5 * time.Second, kernel: fakeKernel{setErr: unix.EINVAL, got: 60},
			nowayout: "1", allowNowayout: true, err: "set timeout 5s: invalid argument: the device counts down anyway and cannot be stopped (nowayout)",
			counting: time.Minute, calls: []string{open, support, "ioctl 7 0xc0045706 5", "ioctl 7 0x80045707"}},
		"unknown nowayout, allowed, and no support flags: left counting": {timeout: 5 * time.Second, kernel: fakeKernel{supportErr: unix.ENOTTY, getErr: unix.ENOTTY},
			allowNowayout: true, err: "read the driver's support flags (WDIOC_GETSUPPORT): inappropriate ioctl for device: the device counts down anyway",
			counting: 0, calls: []string{open, support, "ioctl 7 0x80045707"}},
	} {
		t.Run(name, func(t *testing.T) {
			k := tc.kernel
			sysfs := fakeSysfs(t, tc.nowayout, "")
			l := &Linux{Path: "/dev/watchdog1", sys: k.syscalls(), Sysfs: sysfs, AllowNowayout: tc.allowNowayout}
			got, err := l.Arm(tc.timeout)
			want := strings.ReplaceAll(tc.err, "SYSFS", sysfs)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Arm: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Fatalf("Arm: error %v, want one containing %q", err, want)
			case got != tc.want:
				t.Errorf("Arm: %s, want %s", got, tc.want)
			}
			var counting *CountingError
			if isCounting := errors.As(err, &counting); isCounting != strings.Contains(tc.err, "counts down anyway") || (isCounting && counting.Timeout != tc.counting) {
				t.Errorf("Arm: %#v, want a CountingError %t with timeout %s", err, !isCounting, tc.counting)
			}
			if l.Nowayout() != (l.open && (tc.nowayout != "0")) {
				t.Errorf("Nowayout %t with the device open %t and nowayout %q", l.Nowayout(), l.open, tc.nowayout)
			}
			if strings.Join(k.calls, "\n") != strings.Join(tc.calls, "\n") {
				t.Errorf("system calls:\n\t%s\nwant:\n\t%s", strings.Join(k.calls, "\n\t"), strings.Join(tc.calls, "\n\t"))
			}
		})
	}
}

// TestLinuxFindsItsSysfs: the legacy /dev/watchdog (10:130) is watchdog0's, any other
// device is found by its numbers.
func TestLinuxFindsItsSysfs(t *testing.T) {
	sysfs := fakeSysfs(t, "0", "1")
	k := &fakeKernel{got: 5, numbers: [2]uint32{250, 1}}
	l := &Linux{Path: "/dev/watchdog1", sys: k.syscalls(), Sysfs: sysfs}
	if _, err := l.Arm(5 * time.Second); err == nil || !strings.Contains(err.Error(), filepath.Join(sysfs, "dev/char/250:1/nowayout")+" is 1") {
		t.Errorf("Arm of 250:1, whose nowayout is 1: %v", err)
	}
	k.numbers = [2]uint32{10, 130}
	if _, err := l.Arm(5 * time.Second); err != nil {
		t.Errorf("Arm of 10:130, whose watchdog0 has nowayout 0: %v", err)
	}
}

// TestLinuxFeedAndDisarm: a feed is a WDIOC_KEEPALIVE on the open device; a disarm is the
// magic close, once.
func TestLinuxFeedAndDisarm(t *testing.T) {
	k := &fakeKernel{got: 5}
	l := &Linux{Path: "/dev/watchdog", sys: k.syscalls(), Sysfs: fakeSysfs(t, "0", "")}
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
// meets them. sysfs has no nowayout state for it, so it is refused before it is opened;
// with nowayout allowed, the open works, the support flags are refused, and the error
// names the path and the step. Such a device may count down and cannot be stopped, so
// it stays open, for its owner to feed.
func TestLinuxOnAFileThatIsNoWatchdog(t *testing.T) {
	dev, err := Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	l := dev.(*Linux)
	l.Sysfs = t.TempDir()
	_, err = dev.Arm(5 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "watchdog /dev/null: its nowayout state is unknown (no "+l.Sysfs+"/dev/char/1:3/nowayout)") || l.open {
		t.Fatalf("Arm on /dev/null: %v (open %t), want it refused before opening, naming the sysfs file", err, l.open)
	}
	l.AllowNowayout = true
	_, err = dev.Arm(5 * time.Second)
	var counting *CountingError
	if err == nil || !strings.Contains(err.Error(), "watchdog /dev/null: read the driver's support flags (WDIOC_GETSUPPORT)") || !errors.Is(err, unix.ENOTTY) || !errors.As(err, &counting) {
		t.Fatalf("Arm on /dev/null with nowayout allowed: %v, want the path, the step, ENOTTY and a CountingError", err)
	}
	if err := dev.Feed(); !errors.Is(err, unix.ENOTTY) {
		t.Errorf("Feed of the device left open: %v, want ENOTTY", err)
	}
	if err := dev.Disarm(); err != nil || l.open {
		t.Errorf("Disarm: %v (open %t)", err, l.open)
	}
}

// TestLinuxFailedArmLeavesAnInheritedCountdown: a device an earlier agent left counting
// (its sysfs state "active": that agent stopped feeding a node that is to be fenced) is
// not stopped by a failed Arm of the next agent: no magic close, a CountingError, so the
// node still resets unless the new agent may feed it. Without the rule the failed Arm
// wrote the magic close and the node lived on.
func TestLinuxFailedArmLeavesAnInheritedCountdown(t *testing.T) {
	for state, inherited := range map[string]bool{"active": true, "inactive": false, "": false} {
		t.Run("state "+state, func(t *testing.T) {
			sysfs := fakeSysfs(t, "0", "")
			if state != "" {
				if err := os.WriteFile(filepath.Join(sysfs, "class/watchdog/watchdog0/state"), []byte(state+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			k := fakeKernel{setErr: unix.EINVAL, got: 30}
			l := &Linux{Path: "/dev/watchdog", sys: k.syscalls(), Sysfs: sysfs}
			_, err := l.Arm(5 * time.Second)
			var c *CountingError
			if errors.As(err, &c) != inherited || (inherited && (!c.Inherited || c.Timeout != 30*time.Second)) {
				t.Errorf("Arm: %v, want a CountingError (inherited, 30s): %t", err, inherited)
			}
			if closed := strings.Contains(strings.Join(k.calls, ","), `write 7 "V"`); closed == inherited {
				t.Errorf("magic close written %t with the device counting already %t (calls %v)", closed, inherited, k.calls)
			}
		})
	}
}
