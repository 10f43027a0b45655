package plugin

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The test binary re-executed with hostChildEnv set plays a controller: it launches the
// test agent through a Host, prints the agent's PID and waits to be killed.
const (
	hostChildEnv    = "KUBEFENCE_PLUGIN_TEST_HOST_DIR"
	hostChildSumEnv = "KUBEFENCE_PLUGIN_TEST_HOST_SUM"
)

func runHostChild(dir, sum string) int {
	h, err := NewHost(HostConfig{Dir: dir, Agents: map[string]AgentSpec{testAgent: {SHA256: sum}}, Logger: hclog.NewNullLogger()})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	a, err := h.Agent(testAgent)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	// The process starts with the first call.
	if _, err := a.Describe(context.Background()); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	h.mu.Lock()
	s := h.slots[testAgent]
	h.mu.Unlock()
	s.mu.Lock()
	pid := s.proc.client.ReattachConfig().Pid
	s.mu.Unlock()
	fmt.Println("agent", pid)
	select {}
}

// TestAgentDiesWithHost: when the controller process dies without stopping its agents
// (SIGKILL, or os.Exit on a lost Lease, as a deposed leader does), the kernel kills its
// agents too (a deposed leader's agent was once alive 10 s after it exited).
func TestAgentDiesWithHost(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^$")
	cmd.Env = append(os.Environ(), hostChildEnv+"="+agentDir, hostChildSumEnv+"="+agentSum)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "agent ") {
		t.Fatalf("host child said %q, %v", line, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "agent ")))
	if err != nil {
		t.Fatal(err)
	}
	if dead(pid) {
		t.Fatalf("agent %d not running before its host was killed", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The requirement: every agent gone within 2 s of the controller's death.
	eventually(t, 2*time.Second, fmt.Sprintf("agent %d to die with its host", pid), func() bool { return dead(pid) })
}

// dead reports whether pid is gone or a zombie nobody reaped yet (its code no longer
// runs; a container's init may never reap it).
func dead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

// TestLaunchedAgentStopsOnSIGTERM: an agent the controller launched exits on SIGTERM
// (plugin mode once ignored it, so only SIGKILL stopped an agent).
func TestLaunchedAgentStopsOnSIGTERM(t *testing.T) {
	h, a := newTestHost(t, nil)
	if _, err := a.Describe(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := agentPID(t, h, testAgent)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, fmt.Sprintf("agent %d to exit on SIGTERM", pid), func() bool { return dead(pid) })
}

// TestAgentExitsWhenLifelineCloses: an agent exits once its controller's end of the
// lifeline closes, with the controller process still alive, so that the parent-death
// signal plays no part: the backup that holds where that signal does not fire.
func TestAgentExitsWhenLifelineCloses(t *testing.T) {
	h, a := newTestHost(t, nil)
	if _, err := a.Describe(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := agentPID(t, h, testAgent)
	h.mu.Lock()
	s := h.slots[testAgent]
	h.mu.Unlock()
	s.mu.Lock()
	err := s.proc.lifeline.Close()
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, fmt.Sprintf("agent %d to exit when its lifeline closed", pid), func() bool { return dead(pid) })
}
