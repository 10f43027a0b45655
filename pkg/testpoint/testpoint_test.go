package testpoint

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// childEnv marks the test binary run as the child that goes through a point.
const childEnv = "KUBEFENCE_TESTPOINT_CHILD"

// passed is what the child prints once past the point.
const passed = "passed the point"

// TestChildAtPoint is the child's part: with childEnv set it makes the pauser of Env
// (as pkg/app does) and goes through the point childEnv names. A pause that worked would
// stop the test binary itself, so it runs only in a child of the tests below.
func TestChildAtPoint(t *testing.T) {
	point := os.Getenv(childEnv)
	if point == "" {
		t.Skip("the child of the pause tests only")
	}
	New(os.Getenv(Env)).At(point)
	fmt.Println(passed)
}

// child runs TestChildAtPoint with Env set to pauseAt, going through point. It returns
// the child and a channel that closes when the child printed passed.
func child(t *testing.T, pauseAt, point string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildAtPoint$", "-test.v")
	cmd.Env = append(os.Environ(), Env+"="+pauseAt, childEnv+"="+point)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // a stopped child dies of SIGKILL too
		_ = cmd.Wait()
	})
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), passed) {
				close(done)
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	return cmd, done
}

// stopped reports whether process pid is stopped by a signal (state T in /proc).
func stopped(t *testing.T, pid int) bool {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("read the child's state: %v", err)
	}
	// pid (comm) state ...: comm may hold spaces and parentheses, the state follows the last.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return strings.HasPrefix(strings.TrimSpace(rest), "T")
}

// passesWithoutStop waits for the child to pass its point, failing if it stops first.
func passesWithoutStop(t *testing.T, cmd *exec.Cmd, done <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if stopped(t, cmd.Process.Pid) {
			t.Fatalf("the child stopped itself with %s set", Env)
		}
	}
	t.Fatal("the child did not pass the point within 30s")
}

// TestOtherPointNeverPauses: a pauser stops only at its own point, with or without the tag.
func TestOtherPointNeverPauses(t *testing.T) {
	cmd, done := child(t, AfterCreate, BeforeFenceCall)
	passesWithoutStop(t, cmd, done)
}
