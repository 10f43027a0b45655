package exec_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	fenceexec "github.com/kubefence/kubefence/pkg/fenceagent/exec"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// TestOffStatusOn drives the script through off, status and on, and checks the
// device file and the script's own log: the password reached the script on
// stdin only, and the script saw none of the agent's environment.
func TestOffStatusOn(t *testing.T) {
	const envSecret = "controller-env-credential-77"
	t.Setenv("KUBEFENCE_TEST_CREDENTIAL", envSecret)
	dev := newDevice(t, "on")
	agent := fenceexec.New()
	req := dev.request()
	steps := []struct {
		name     string
		call     func() (plugin.Result, error)
		want     plugin.PowerState
		evidence []string
	}{
		{"status on", func() (plugin.Result, error) { return agent.Status(fixture.CallCtx(t, 10*time.Second), req) },
			plugin.StateOn, []string{"status exit 0 (on)"}},
		{"fence off", func() (plugin.Result, error) {
			return agent.Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff)
		}, plugin.StateOff, []string{"action=off exit 0", "status exit 2 (off)", "verified off after 2 status read(s)"}},
		{"status off", func() (plugin.Result, error) { return agent.Status(fixture.CallCtx(t, 10*time.Second), req) },
			plugin.StateOff, []string{"status exit 2 (off)"}},
		{"fence off again", func() (plugin.Result, error) {
			return agent.Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff)
		}, plugin.StateOff, []string{"already off, nothing sent"}},
		{"unfence", func() (plugin.Result, error) { return agent.Unfence(fixture.CallCtx(t, 10*time.Second), req) },
			plugin.StateOn, []string{"action=on exit 0", "verified on after 1 status read(s)"}},
	}
	for _, s := range steps {
		res, err := s.call()
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if res.State != s.want {
			t.Fatalf("%s: state %s, want %s (evidence %q)", s.name, res.State, s.want, res.Evidence)
		}
		for _, w := range s.evidence {
			if !strings.Contains(res.Evidence, w) {
				t.Errorf("%s: evidence %q lacks %q", s.name, res.Evidence, w)
			}
		}
		if got, _ := dev.observe(); got != s.want {
			t.Errorf("%s: device file says %s, want %s", s.name, got, s.want)
		}
	}

	log := dev.log(t)
	if !strings.Contains(log, "argv: "+dev.script+" \n") {
		t.Errorf("script got arguments; log:\n%s", log)
	}
	if !strings.Contains(log, "keys: action plug state_file password") {
		t.Errorf("stdin keys are not action, plug, params, secrets; log:\n%s", log)
	}
	if !strings.Contains(log, "action: off plug: node-a-plug") || !strings.Contains(log, "action: on plug: node-a-plug") {
		t.Errorf("script never saw action=off and action=on for the plug; log:\n%s", log)
	}
	for _, leak := range []string{testPassword, envSecret, "KUBEFENCE_TEST_CREDENTIAL"} {
		if strings.Contains(log, leak) {
			t.Errorf("script argv or env contains %q; log:\n%s", leak, log)
		}
	}
}

// TestFenceFailures checks that no failure reads as success, each error names
// the script and target, and none carries the password.
func TestFenceFailures(t *testing.T) {
	tests := map[string]struct {
		mutate   func(*plugin.Request)
		timeout  time.Duration
		wantKind plugin.ErrorKind
		wantCtx  bool
		wantMsg  string
	}{
		"script lies about off": {
			mutate:   func(r *plugin.Request) { r.Params["mode"] = "liar"; r.Params["verify_timeout"] = "300ms" },
			timeout:  10 * time.Second,
			wantKind: plugin.KindNotVerified, wantMsg: "not read back as off within verify_timeout 300ms (last state on",
		},
		"status fails": {
			mutate:   func(r *plugin.Request) { r.Params["mode"] = "broken"; r.Params["verify_timeout"] = "300ms" },
			timeout:  10 * time.Second,
			wantKind: plugin.KindRetryable, wantMsg: "fence_test node-a-plug action=status: exit 1",
		},
		"wrong password": {
			mutate:   func(r *plugin.Request) { r.Secrets["password"] = "wrong-password-1" },
			timeout:  10 * time.Second,
			wantKind: plugin.KindRetryable, wantMsg: "fence_test node-a-plug action=off: exit 1: login denied",
		},
		"script hangs past the deadline": {
			mutate:  func(r *plugin.Request) { r.Params["mode"] = "hang" },
			timeout: 300 * time.Millisecond,
			wantCtx: true, wantMsg: "action=status",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dev := newDevice(t, "on")
			req := dev.request()
			tc.mutate(&req)
			start := time.Now()
			res, err := fenceexec.New().Fence(fixture.CallCtx(t, tc.timeout), req, plugin.ActionOff)
			if err == nil {
				t.Fatalf("fence succeeded: %+v", res)
			}
			if res.State == plugin.StateOff {
				t.Errorf("failed fence reports state off")
			}
			if tc.wantCtx {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err = %v, want a deadline error", err)
				}
				if elapsed := time.Since(start); elapsed > 3*time.Second {
					t.Errorf("returned %v after a %v deadline", elapsed, tc.timeout)
				}
			} else if plugin.KindOf(err) != tc.wantKind {
				t.Errorf("err = %v: kind %s, want %s", err, plugin.KindOf(err), tc.wantKind)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err = %q, want it to contain %q", err, tc.wantMsg)
			}
			if strings.Contains(err.Error(), testPassword) || strings.Contains(res.Evidence, testPassword) {
				t.Errorf("password leaked: %v / %q", err, res.Evidence)
			}
		})
	}
}

func TestSecretsWithLineBreaksRefused(t *testing.T) {
	dev := newDevice(t, "on")
	req := dev.request()
	req.Secrets["password"] = "pw\naction=on"
	_, err := fenceexec.New().Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff)
	if err == nil || plugin.KindOf(err) != plugin.KindPermanent || !strings.Contains(err.Error(), "secret password") {
		t.Fatalf("err = %v, want a permanent error naming secret password", err)
	}
	if strings.Contains(err.Error(), "pw\n") {
		t.Errorf("error quotes the secret: %v", err)
	}
	if got, _ := dev.observe(); got != plugin.StateOn {
		t.Errorf("device is %s after a refused request", got)
	}
}
