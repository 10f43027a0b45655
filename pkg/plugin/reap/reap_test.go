package reap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// escaper is a fence script whose child leaves the script's session (setsid) and, past
// any deadline the tests give, writes a marker: the action landing after its call
// returned, as was seen with a real agent. The script itself then runs on, or exits
// at once when told to.
const escaper = `#!/bin/sh
setsid sh -c 'sleep 2; touch "$0/marker"' "$(dirname "$0")" &
echo started
[ "$1" = exit ] && exit 3
sleep 30
`

// callerEnv makes the test binary play an agent: it runs the script under a reaper and
// waits, until the test kills it.
const callerEnv = "KUBEFENCE_REAP_TEST_CALLER"

func TestMain(m *testing.M) {
	if script := os.Getenv(callerEnv); script != "" {
		cmd, err := CommandContext(context.Background(), script)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		cmd.Stdout = os.Stdout
		_ = cmd.Run()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// newScript writes escaper into a directory of its own; every process of a call names
// that directory on its command line, so /proc tells which are still alive.
func newScript(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "fence_escaper")
	if err := os.WriteFile(path, []byte(escaper), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// alive lists the live (not zombie) processes whose command line mentions dir.
func alive(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] != "Z" {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

// checkNothingLeft fails if any process of the call runs, and, once the escaped child
// would have written its marker, if the marker is there.
func checkNothingLeft(t *testing.T, script string) {
	t.Helper()
	dir := filepath.Dir(script)
	if left := alive(dir); len(left) > 0 {
		t.Fatalf("processes of the call still alive after it returned: %v", left)
	}
	// Nothing of the call runs, so nothing can write the marker; look once the escaped
	// child's 2 s would have passed, to show the action never landed.
	<-time.After(2500 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(dir, "marker")); err == nil {
		t.Fatalf("the escaped child wrote its marker after the call returned")
	}
}

// TestNothingOutlivesTheCall: a script whose child called setsid leaves nothing behind,
// whether the call's deadline passes, it is cancelled, or the script exits by itself.
func TestNothingOutlivesTheCall(t *testing.T) {
	for name, tc := range map[string]struct {
		arg    string
		cancel bool
		code   int
	}{
		"deadline":            {},
		"cancel":              {cancel: true},
		"script exits itself": {arg: "exit", code: 3},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			script := newScript(t)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if tc.cancel {
				ctx, cancel = context.WithCancel(context.Background())
				defer cancel()
			}
			cmd, err := CommandContext(ctx, script, tc.arg)
			if err != nil {
				t.Fatal(err)
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if line, _ := bufio.NewReader(out).ReadString('\n'); line != "started\n" {
				t.Fatalf("script said %q", line)
			}
			if tc.cancel {
				cancel()
			}
			err = cmd.Wait()
			var exitErr *exec.ExitError
			switch {
			case tc.code != 0 && (!errors.As(err, &exitErr) || exitErr.ExitCode() != tc.code):
				t.Errorf("exit: %v, want code %d", err, tc.code)
			case tc.code == 0 && ctx.Err() == nil:
				t.Errorf("call ended by itself (%v) before its deadline or cancel", err)
			}
			checkNothingLeft(t, script)
		})
	}
}

// TestNothingOutlivesTheAgent: when the agent process running the call is SIGKILLed
// mid-call, the reaper (told by the kernel) clears the call's processes within 2 s.
func TestNothingOutlivesTheAgent(t *testing.T) {
	script := newScript(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	agent := exec.Command(self, "-test.run", "^$")
	agent.Env = append(os.Environ(), callerEnv+"="+script)
	out, err := agent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Process.Kill(); _ = agent.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "started\n" {
		t.Fatalf("script said %q", line)
	}
	if err := agent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = agent.Wait()
	dir := filepath.Dir(script)
	deadline := time.Now().Add(2 * time.Second)
	for left := alive(dir); len(left) > 0; left = alive(dir) {
		if time.Now().After(deadline) {
			t.Fatalf("2s after the agent died, its call's processes still run: %v", left)
		}
		<-time.After(20 * time.Millisecond)
	}
	checkNothingLeft(t, script)
}
