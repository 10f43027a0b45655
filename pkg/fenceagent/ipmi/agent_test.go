package ipmi_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/fenceagent/ipmi"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// These tests run against real ipmi_sim BMCs and check the BMC's own power file and
// log, never only what the driver says.

const testPassword = "Pw-7f3a9c2e"

func startBMC(t testing.TB, opts bmc.IPMIOptions) *bmc.IPMISim {
	t.Helper()
	opts.Dir = t.TempDir()
	if opts.Password == "" {
		opts.Password = testPassword
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := bmc.StartIPMI(ctx, opts)
	if err != nil {
		t.Fatalf("start bmc: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop bmc: %v", err)
		}
	})
	return s
}

func requestFor(s *bmc.IPMISim) plugin.Request {
	return plugin.Request{
		Node:    "node-a",
		Target:  fmt.Sprintf("%s:%d", s.Host(), s.Port()),
		Params:  map[string]string{ipmi.ParamPollInterval: "50ms", ipmi.ParamVerifyTimeout: "3s", ipmi.ParamTimeout: "3s"},
		Secrets: map[string]string{ipmi.SecretUsername: s.User(), ipmi.SecretPassword: s.Password()},
		Epoch:   7,
	}
}

func poweredOn(t *testing.T, s *bmc.IPMISim) bool {
	t.Helper()
	on, err := s.PoweredOn()
	if err != nil {
		t.Fatalf("read bmc power file: %v", err)
	}
	return on
}

func actions(t *testing.T, s *bmc.IPMISim) []string {
	t.Helper()
	events, err := s.Events()
	if err != nil {
		t.Fatalf("read bmc events: %v", err)
	}
	var out []string
	for _, e := range events {
		out = append(out, e.Source+":"+e.Action)
	}
	return out
}

func checkNoSecret(t *testing.T, what, text string) {
	t.Helper()
	if strings.Contains(text, testPassword) {
		t.Errorf("%s contains the password: %q", what, text)
	}
}

// TestFenceOffSeveralBMCs fences two of three BMCs at once and checks that exactly
// those two are off, by their own state files and logs.
func TestFenceOffSeveralBMCs(t *testing.T) {
	t.Parallel()
	sims := []*bmc.IPMISim{
		startBMC(t, bmc.IPMIOptions{PoweredOn: true}),
		startBMC(t, bmc.IPMIOptions{PoweredOn: true}),
		startBMC(t, bmc.IPMIOptions{PoweredOn: true}),
	}
	agent := ipmi.New()
	var wg sync.WaitGroup
	results := make([]plugin.Result, 2)
	errs := make([]error, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = agent.Fence(fixture.CallCtx(t, 15*time.Second), requestFor(sims[i]), plugin.ActionOff)
		}()
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("fence bmc %d: %v", i, errs[i])
		}
		if results[i].State != plugin.StateOff {
			t.Errorf("bmc %d result state %q, want off", i, results[i].State)
		}
		if poweredOn(t, sims[i]) {
			t.Errorf("bmc %d still powered on after a successful fence", i)
		}
		if got := actions(t, sims[i]); strings.Join(got, ",") != "bmc:off" {
			t.Errorf("bmc %d events %v, want [bmc:off]", i, got)
		}
		ev := results[i].Evidence
		t.Logf("bmc %d evidence: %s", i, ev)
		for _, want := range []string{"via ipmitool", "read on", "sent power off", "verified"} {
			if !strings.Contains(ev, want) {
				t.Errorf("bmc %d evidence %q lacks %q", i, ev, want)
			}
		}
		checkNoSecret(t, "evidence", ev)
	}
	if !poweredOn(t, sims[2]) || len(actions(t, sims[2])) != 0 {
		t.Errorf("untargeted bmc was touched: on=%v events=%v", poweredOn(t, sims[2]), actions(t, sims[2]))
	}
}

// TestPowerActions covers each action from each starting state.
func TestPowerActions(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		startOn    bool
		call       func(a *ipmi.Agent, ctx context.Context, req plugin.Request) (plugin.Result, error)
		wantOn     bool
		wantEvents string
		evidence   string
	}{
		"off when already off sends nothing": {
			startOn: false, wantOn: false, wantEvents: "", evidence: "already off",
			call: func(a *ipmi.Agent, ctx context.Context, r plugin.Request) (plugin.Result, error) {
				return a.Fence(ctx, r, plugin.ActionOff)
			},
		},
		"on": {
			startOn: false, wantOn: true, wantEvents: "bmc:on", evidence: "verified",
			call: func(a *ipmi.Agent, ctx context.Context, r plugin.Request) (plugin.Result, error) {
				return a.Fence(ctx, r, plugin.ActionOn)
			},
		},
		"unfence": {
			startOn: false, wantOn: true, wantEvents: "bmc:on", evidence: "verified",
			call: func(a *ipmi.Agent, ctx context.Context, r plugin.Request) (plugin.Result, error) {
				return a.Unfence(ctx, r)
			},
		},
		"unfence when already on": {
			startOn: true, wantOn: true, wantEvents: "", evidence: "already on",
			call: func(a *ipmi.Agent, ctx context.Context, r plugin.Request) (plugin.Result, error) {
				return a.Unfence(ctx, r)
			},
		},
		"reboot goes through off": {
			startOn: true, wantOn: true, wantEvents: "bmc:off,bmc:on", evidence: "sent power off",
			call: func(a *ipmi.Agent, ctx context.Context, r plugin.Request) (plugin.Result, error) {
				return a.Fence(ctx, r, plugin.ActionReboot)
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startBMC(t, bmc.IPMIOptions{PoweredOn: tc.startOn})
			res, err := tc.call(ipmi.New(), fixture.CallCtx(t, 15*time.Second), requestFor(s))
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if on := poweredOn(t, s); on != tc.wantOn {
				t.Errorf("bmc powered on = %v, want %v", on, tc.wantOn)
			}
			wantState := plugin.StateOff
			if tc.wantOn {
				wantState = plugin.StateOn
			}
			if res.State != wantState {
				t.Errorf("result state %q, want %q", res.State, wantState)
			}
			if got := strings.Join(actions(t, s), ","); got != tc.wantEvents {
				t.Errorf("bmc events %q, want %q", got, tc.wantEvents)
			}
			if !strings.Contains(res.Evidence, tc.evidence) {
				t.Errorf("evidence %q lacks %q", res.Evidence, tc.evidence)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	for name, on := range map[string]bool{"on": true, "off": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startBMC(t, bmc.IPMIOptions{PoweredOn: on})
			res, err := ipmi.New().Status(fixture.CallCtx(t, 10*time.Second), requestFor(s))
			if err != nil {
				t.Fatalf("status: %v", err)
			}
			if res.State != plugin.PowerState(name) {
				t.Errorf("state %q, want %q", res.State, name)
			}
			// The sim's own hand changes the state; Status must see it.
			if err := s.SetPower(!on); err != nil {
				t.Fatal(err)
			}
			res, err = ipmi.New().Status(fixture.CallCtx(t, 10*time.Second), requestFor(s))
			if err != nil {
				t.Fatalf("status: %v", err)
			}
			if want := map[bool]plugin.PowerState{true: plugin.StateOn, false: plugin.StateOff}[!on]; res.State != want {
				t.Errorf("state after SetPower %q, want %q", res.State, want)
			}
		})
	}
}

func TestBadCredentialsArePermanent(t *testing.T) {
	t.Parallel()
	s := startBMC(t, bmc.IPMIOptions{PoweredOn: true})
	tests := map[string]map[string]string{
		"wrong password": {ipmi.SecretUsername: s.User(), ipmi.SecretPassword: "Wr0ng-" + testPassword},
		"unknown user":   {ipmi.SecretUsername: "nobody", ipmi.SecretPassword: testPassword},
	}
	for name, secrets := range tests {
		t.Run(name, func(t *testing.T) {
			req := requestFor(s)
			req.Secrets = secrets
			res, err := ipmi.New().Fence(fixture.CallCtx(t, 15*time.Second), req, plugin.ActionOff)
			if err == nil {
				t.Fatal("fence with bad credentials succeeded")
			}
			t.Logf("error: %v", err)
			if k := plugin.KindOf(err); k != plugin.KindPermanent {
				t.Errorf("kind %s, want Permanent: %v", k, err)
			}
			checkNoSecret(t, "error", err.Error())
			checkNoSecret(t, "evidence", res.Evidence)
			if strings.Contains(err.Error(), secrets[ipmi.SecretPassword]) {
				t.Errorf("error contains the wrong password: %v", err)
			}
			if res.State != plugin.StateUnknown {
				t.Errorf("state %q, want unknown", res.State)
			}
		})
	}
	if !poweredOn(t, s) || len(actions(t, s)) != 0 {
		t.Errorf("bmc changed by rejected calls: events %v", actions(t, s))
	}
}

func TestUnreachableBMC(t *testing.T) {
	t.Parallel()
	// A port that nothing listens on: bind it to learn a free number, then release it.
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := conn.LocalAddr().(*net.UDPAddr).Port
	conn.Close()
	req := plugin.Request{
		Node:    "node-x",
		Target:  fmt.Sprintf("127.0.0.1:%d", port),
		Params:  map[string]string{ipmi.ParamTimeout: "5s"},
		Secrets: map[string]string{ipmi.SecretUsername: "admin", ipmi.SecretPassword: testPassword},
	}
	tests := map[string]time.Duration{"per-call timeout": 10 * time.Second, "short ctx deadline": 1 * time.Second}
	for name, deadline := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := ipmi.New().Fence(fixture.CallCtx(t, deadline), req, plugin.ActionOff)
			if err == nil {
				t.Fatal("fence of an unreachable bmc succeeded")
			}
			t.Logf("error: %v", err)
			if k := plugin.KindOf(err); k != plugin.KindTargetUnreachable {
				t.Errorf("kind %s, want TargetUnreachable: %v", k, err)
			}
			if elapsed := time.Since(start); elapsed > deadline+2*time.Second {
				t.Errorf("returned after %s, deadline was %s", elapsed, deadline)
			}
			checkNoSecret(t, "error", err.Error())
		})
	}
}

// TestBrokenBMCNeverSucceeds: a BMC that acknowledges power off and stays on must
// fail the fence, with the state it still reports.
func TestBrokenBMCNeverSucceeds(t *testing.T) {
	t.Parallel()
	s := startBMC(t, bmc.IPMIOptions{PoweredOn: true, IgnorePowerOff: true})
	req := requestFor(s)
	req.Params[ipmi.ParamVerifyTimeout] = "1s"
	for _, action := range []plugin.Action{plugin.ActionOff, plugin.ActionReboot} {
		t.Run(string(action), func(t *testing.T) {
			start := time.Now()
			res, err := ipmi.New().Fence(fixture.CallCtx(t, 10*time.Second), req, action)
			if err == nil {
				t.Fatalf("fence %s of a BMC that ignores power off succeeded: %+v", action, res)
			}
			t.Logf("error: %v; evidence: %s", err, res.Evidence)
			if k := plugin.KindOf(err); k != plugin.KindNotVerified {
				t.Errorf("kind %s, want NotVerified: %v", k, err)
			}
			if !strings.Contains(err.Error(), "still reports on") {
				t.Errorf("error %q does not name the last state read", err)
			}
			if res.State != plugin.StateOn {
				t.Errorf("result state %q, want on", res.State)
			}
			if elapsed := time.Since(start); elapsed < time.Second || elapsed > 5*time.Second {
				t.Errorf("gave up after %s, verifyTimeout is 1s", elapsed)
			}
		})
	}
	if !poweredOn(t, s) {
		t.Error("broken bmc is off")
	}
	if got := actions(t, s); len(got) != 2 || got[0] != "bmc:ignored-off" {
		t.Errorf("bmc events %v, want two ignored-off", got)
	}
}

// TestPasswordNeverOnArgvOrEnv puts a recording wrapper named ipmitool first on PATH
// and checks what the real ipmitool would have been given.
func TestPasswordNeverOnArgvOrEnv(t *testing.T) {
	real, err := exec.LookPath("ipmitool")
	if err != nil {
		t.Fatalf("ipmitool not found (apt-get install openipmi ipmitool): %v", err)
	}
	s := startBMC(t, bmc.IPMIOptions{PoweredOn: true})
	dir := t.TempDir()
	record := filepath.Join(dir, "record")
	wrapper := fmt.Sprintf(`#!/bin/sh
{
	printf 'ARGV'; for a in "$@"; do printf ' %%s' "$a"; done; printf '\n'
	printf 'ENV %%s\n' "$(env | tr '\n' ' ')"
	prev=""
	for a in "$@"; do
		[ "$prev" = "-f" ] && printf 'PWFILE %%s %%s\n' "$a" "$(stat -c %%a "$a")"
		prev=$a
	done
} >> %q
exec %q "$@"
`, record, real)
	if err := os.WriteFile(filepath.Join(dir, "ipmitool"), []byte(wrapper), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))

	// At Operator privilege, as docs/bmc-setup.md advises: ipmi_sim powers off and on.
	req := requestFor(s)
	req.Params[ipmi.ParamPrivilege] = "operator"
	if _, err := ipmi.New().Fence(fixture.CallCtx(t, 15*time.Second), req, plugin.ActionReboot); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatalf("wrapper did not run: %v", err)
	}
	var argvLines, pwFiles int
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		kind, rest, _ := strings.Cut(line, " ")
		switch kind {
		case "ARGV":
			argvLines++
			checkNoSecret(t, "ipmitool argv", rest)
			if !strings.Contains(rest, " -L OPERATOR ") {
				t.Errorf("ipmitool argv %q lacks -L OPERATOR", rest)
			}
		case "ENV":
			checkNoSecret(t, "ipmitool environment", rest)
		case "PWFILE":
			pwFiles++
			path, mode, _ := strings.Cut(rest, " ")
			if mode != "600" {
				t.Errorf("password file %s has mode %s, want 600", path, mode)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("password file %s left behind (stat err %v)", path, err)
			}
		}
	}
	if argvLines < 4 || pwFiles != argvLines {
		t.Errorf("%d ipmitool runs, %d with a password file; want >= 4 and all", argvLines, pwFiles)
	}
}
