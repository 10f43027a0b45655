package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The test agent binary, built once for the whole package by TestMain.
var (
	agentDir string
	agentSum string
)

const (
	testAgent    = "testagent"
	testPassword = "hunter2-must-not-leak-5f1c"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(hostChildEnv); dir != "" {
		os.Exit(runHostChild(dir, os.Getenv(hostChildSumEnv)))
	}
	dir, err := os.MkdirTemp("", "kubefence-plugin-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if err := buildTestAgent(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func buildTestAgent(dir string) error {
	bin := filepath.Join(dir, testAgent)
	cmd := exec.Command("go", "build", "-o", bin, "./internal/testagent")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build test agent: %w", err)
	}
	f, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	agentDir, agentSum = dir, hex.EncodeToString(h.Sum(nil))
	return nil
}

// newTestHost returns a host serving the test agent, closed when the test ends.
func newTestHost(tb testing.TB, logger hclog.Logger) (*Host, Agent) {
	tb.Helper()
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	h, err := NewHost(HostConfig{
		Dir:    agentDir,
		Agents: map[string]AgentSpec{testAgent: {SHA256: agentSum}},
		Logger: logger,
	})
	if err != nil {
		tb.Fatalf("new host: %v", err)
	}
	tb.Cleanup(h.Close)
	a, err := h.Agent(testAgent)
	if err != nil {
		tb.Fatalf("agent: %v", err)
	}
	return h, a
}

func testRequest(stateDir string) Request {
	return Request{
		Node:    "node-1",
		Target:  "bmc-1",
		Params:  map[string]string{"state_dir": stateDir},
		Secrets: map[string]string{"password": testPassword},
		Epoch:   3,
	}
}

// agentPID is the PID of the live process of name, read the way an operator
// would find it: from go-plugin's reattach config.
func agentPID(t *testing.T, h *Host, name string) int {
	t.Helper()
	h.mu.Lock()
	s := h.slots[name]
	h.mu.Unlock()
	if s == nil {
		t.Fatalf("agent %s never launched", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		t.Fatalf("agent %s has no process", name)
	}
	return s.proc.client.ReattachConfig().Pid
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestHostCallsEveryMethod(t *testing.T) {
	_, a := newTestHost(t, nil)
	ctx := t.Context()
	req := testRequest(t.TempDir())

	d, err := a.Describe(ctx)
	if err != nil || d.Name != testAgent || len(d.Params) != 3 {
		t.Fatalf("describe = %+v, %v", d, err)
	}
	if err := a.Validate(ctx, req.Params); err != nil {
		t.Errorf("validate: %v", err)
	}
	if err := a.Validate(ctx, nil); KindOf(err) != KindPermanent {
		t.Errorf("validate without state_dir = %v, want a permanent error", err)
	}
	steps := []struct {
		name string
		call func() (Result, error)
		want PowerState
	}{
		{"status before", func() (Result, error) { return a.Status(ctx, req) }, StateOn},
		{"fence off", func() (Result, error) { return a.Fence(ctx, req, ActionOff) }, StateOff},
		{"status fenced", func() (Result, error) { return a.Status(ctx, req) }, StateOff},
		{"unfence", func() (Result, error) { return a.Unfence(ctx, req) }, StateOn},
		{"status after", func() (Result, error) { return a.Status(ctx, req) }, StateOn},
	}
	for _, s := range steps {
		res, err := s.call()
		if err != nil || res.State != s.want {
			t.Fatalf("%s = %+v, %v; want state %s", s.name, res, err, s.want)
		}
	}
}

func TestHostRestartsAgentKilledMidCall(t *testing.T) {
	h, a := newTestHost(t, nil)
	stateDir := t.TempDir()
	req := testRequest(stateDir)
	if _, err := a.Status(t.Context(), req); err != nil {
		t.Fatalf("warm up: %v", err)
	}
	pid := agentPID(t, h, testAgent)

	blocking := testRequest(stateDir)
	blocking.Params["block"] = "true"
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := a.Fence(ctx, blocking, ActionOff)
		errc <- err
	}()
	eventually(t, 10*time.Second, "the fence call to reach the agent", func() bool {
		_, err := os.Stat(filepath.Join(stateDir, "inflight"))
		return err == nil
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill agent: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrAgentDied) || !strings.Contains(err.Error(), testAgent) {
			t.Fatalf("err = %v, want ErrAgentDied naming %s", err, testAgent)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("fence call did not return after the agent was killed")
	}

	res, err := a.Status(t.Context(), req)
	if err != nil {
		t.Fatalf("status on restarted agent: %v", err)
	}
	if newPID := agentPID(t, h, testAgent); newPID == pid {
		t.Errorf("agent still has pid %d after being killed", pid)
	}
	if !strings.Contains(res.Evidence, "by pid") {
		t.Errorf("evidence = %q", res.Evidence)
	}
}

func TestHostRelaunchesAgentThatDiedBetweenCalls(t *testing.T) {
	h, a := newTestHost(t, nil)
	req := testRequest(t.TempDir())
	if _, err := a.Status(t.Context(), req); err != nil {
		t.Fatalf("warm up: %v", err)
	}
	pid := agentPID(t, h, testAgent)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill agent: %v", err)
	}
	eventually(t, 10*time.Second, "the host to notice the exit", func() bool {
		h.mu.Lock()
		s := h.slots[testAgent]
		h.mu.Unlock()
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.proc.client.Exited()
	})
	if _, err := a.Status(t.Context(), req); err != nil {
		t.Fatalf("status after idle death = %v, want a transparent relaunch", err)
	}
	if agentPID(t, h, testAgent) == pid {
		t.Errorf("agent was not relaunched")
	}
}

func TestHostRefusesWrongChecksum(t *testing.T) {
	other := sha256.Sum256([]byte("some other build"))
	h, err := NewHost(HostConfig{
		Dir:    agentDir,
		Agents: map[string]AgentSpec{testAgent: {SHA256: hex.EncodeToString(other[:])}},
		Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	a, err := h.Agent(testAgent)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Describe(t.Context())
	if err == nil || !strings.Contains(err.Error(), "checksum mismatch for agent "+testAgent) {
		t.Fatalf("err = %v, want a checksum mismatch naming the agent", err)
	}
	if KindOf(err) != KindPermanent || errors.Is(err, ErrAgentDied) {
		t.Errorf("err = %v: kind %s, want permanent and not a dead agent", err, KindOf(err))
	}
}

func TestHostRefusesBadNames(t *testing.T) {
	h, _ := newTestHost(t, nil)
	for _, name := range []string{"../../bin/sh", "/bin/sh", "Agent", "", "a/b", strings.Repeat("a", 64), "unknown"} {
		t.Run(name, func(t *testing.T) {
			_, err := h.Agent(name)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
				t.Errorf("Agent(%q) = %v, want an error naming it", name, err)
			}
		})
	}
}

func TestHostConfigValidate(t *testing.T) {
	tests := map[string]struct {
		cfg  HostConfig
		want []string
	}{
		"ok": {cfg: HostConfig{Dir: "/x", Agents: map[string]AgentSpec{"ipmi": {SHA256: agentSum}}}},
		"everything wrong": {
			cfg: HostConfig{Agents: map[string]AgentSpec{
				"../../bin/sh": {SHA256: agentSum},
				"ipmi":         {Binary: "../ipmi", SHA256: "abc"},
			}},
			want: []string{"dir: must be set", `agents["../../bin/sh"]: invalid agent name`,
				`agents["ipmi"].binary`, `agents["ipmi"].sha256`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 && err != nil {
				t.Fatalf("validate: %v", err)
			}
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want it to mention %s", err, w)
				}
			}
		})
	}
}

func TestHostRefusesSymlinkOutOfDir(t *testing.T) {
	dir := t.TempDir()
	// The link points at a binary with the right checksum: only its place is wrong.
	if err := os.Symlink(filepath.Join(agentDir, testAgent), filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	h, err := NewHost(HostConfig{
		Dir:    dir,
		Agents: map[string]AgentSpec{"escape": {SHA256: agentSum}},
		Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	a, err := h.Agent("escape")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Describe(t.Context()); err == nil || !strings.Contains(err.Error(), "outside the plugin dir") {
		t.Fatalf("err = %v, want a refusal to leave the plugin dir", err)
	}
}

// syncBuffer collects log output written from go-plugin's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestHostKeepsSecretsInRequestsOnly(t *testing.T) {
	const envSecret = "cloud-token-from-controller-env"
	t.Setenv("KUBEFENCE_TEST_CREDENTIAL", envSecret)
	var logs syncBuffer
	h, a := newTestHost(t, hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &logs}))
	req := testRequest(t.TempDir())
	if _, err := a.Fence(t.Context(), req, ActionOff); err != nil {
		t.Fatalf("fence: %v", err)
	}
	if _, err := a.Status(t.Context(), req); err != nil {
		t.Fatalf("status: %v", err)
	}
	pid := agentPID(t, h, testAgent)
	for _, f := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
		if err != nil {
			t.Fatalf("read %s: %v", f, err)
		}
		for _, secret := range []string{testPassword, envSecret, "KUBEFENCE_TEST_CREDENTIAL"} {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("/proc/%d/%s contains %q", pid, f, secret)
			}
		}
	}
	h.Close() // flushes the agent's stderr into the log
	out := logs.String()
	if !strings.Contains(out, "agent launched") || !strings.Contains(out, "target=bmc-1") {
		t.Fatalf("log capture saw neither the host nor the agent:\n%s", out)
	}
	if strings.Contains(out, testPassword) {
		t.Errorf("host log contains the secret:\n%s", out)
	}
}

func TestHostConcurrentCallsShareOneProcess(t *testing.T) {
	h, a := newTestHost(t, nil)
	req := testRequest(t.TempDir())
	const callers = 8
	evidence := make([]string, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			var res Result
			res, errs[i] = a.Status(t.Context(), req)
			evidence[i] = res.Evidence
		})
	}
	wg.Wait()
	want := fmt.Sprintf("by pid %d", agentPID(t, h, testAgent))
	for i := range callers {
		if errs[i] != nil || !strings.HasSuffix(evidence[i], want) {
			t.Errorf("caller %d: %q, %v; want evidence %q", i, evidence[i], errs[i], want)
		}
	}
}

func TestHostCloseKillsAgents(t *testing.T) {
	h, a := newTestHost(t, nil)
	req := testRequest(t.TempDir())
	if _, err := a.Status(t.Context(), req); err != nil {
		t.Fatalf("status: %v", err)
	}
	pid := agentPID(t, h, testAgent)
	h.Close()
	eventually(t, 10*time.Second, "the agent process to go away", func() bool { return processGone(pid) })
	if _, err := a.Status(t.Context(), req); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("status after close = %v, want an error", err)
	}
}
