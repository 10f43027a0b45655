package ipmi_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/fenceagent/ipmi"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/test/sim/bmc"
	"github.com/kubefence/kubefence/test/sim/redfish"
)

// These tests run against the Redfish service of test/sim and check its own power
// state and log, never only what the driver says.

func startRedfish(t testing.TB, opts redfish.Options) *redfish.Server {
	t.Helper()
	if opts.Password == "" {
		opts.Password = testPassword
	}
	s, err := redfish.Start(opts)
	if err != nil {
		t.Fatalf("start redfish: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func redfishRequest(s *redfish.Server) plugin.Request {
	return plugin.Request{
		Node:   "node-r",
		Target: s.Address(),
		Params: map[string]string{
			ipmi.ParamProtocol: ipmi.ProviderRedfish, ipmi.ParamCABundle: string(s.CAPEM()),
			ipmi.ParamPollInterval: "20ms", ipmi.ParamVerifyTimeout: "3s", ipmi.ParamTimeout: "3s",
		},
		Secrets: map[string]string{ipmi.SecretUsername: s.User(), ipmi.SecretPassword: s.Password()},
		Epoch:   3,
	}
}

func rfOn(t *testing.T, s *redfish.Server, id string) bool {
	t.Helper()
	on, err := s.PoweredOn(id)
	if err != nil {
		t.Fatal(err)
	}
	return on
}

func rfEvents(t *testing.T, s *redfish.Server, id string) string {
	t.Helper()
	events, err := s.Events(id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range events {
		out = append(out, e.Source+":"+e.Action)
	}
	return strings.Join(out, ",")
}

func TestRedfishPowerActions(t *testing.T) {
	t.Parallel()
	fence := func(action plugin.Action) func(*ipmi.Agent, context.Context, plugin.Request) (plugin.Result, error) {
		return func(a *ipmi.Agent, ctx context.Context, r plugin.Request) (plugin.Result, error) {
			return a.Fence(ctx, r, action)
		}
	}
	tests := map[string]struct {
		startOn    bool
		call       func(*ipmi.Agent, context.Context, plugin.Request) (plugin.Result, error)
		wantOn     bool
		wantEvents string
		evidence   string
	}{
		"off":                     {startOn: true, call: fence(plugin.ActionOff), wantEvents: "bmc:off", evidence: "verified"},
		"off when already off":    {startOn: false, call: fence(plugin.ActionOff), wantEvents: "", evidence: "already off"},
		"on":                      {startOn: false, call: fence(plugin.ActionOn), wantOn: true, wantEvents: "bmc:on", evidence: "verified"},
		"reboot goes through off": {startOn: true, call: fence(plugin.ActionReboot), wantOn: true, wantEvents: "bmc:off,bmc:on", evidence: "sent power off"},
		"unfence": {startOn: false, wantOn: true, wantEvents: "bmc:on", evidence: "verified",
			call: func(a *ipmi.Agent, ctx context.Context, r plugin.Request) (plugin.Result, error) {
				return a.Unfence(ctx, r)
			}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startRedfish(t, redfish.Options{Systems: []redfish.SystemOptions{{ID: "1", PoweredOn: tc.startOn}}})
			res, err := tc.call(ipmi.New(), fixture.CallCtx(t, 10*time.Second), redfishRequest(s))
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			t.Logf("evidence: %s", res.Evidence)
			if on := rfOn(t, s, "1"); on != tc.wantOn {
				t.Errorf("system powered on = %v, want %v", on, tc.wantOn)
			}
			if want := map[bool]plugin.PowerState{true: plugin.StateOn, false: plugin.StateOff}[tc.wantOn]; res.State != want {
				t.Errorf("result state %q, want %q", res.State, want)
			}
			if got := rfEvents(t, s, "1"); got != tc.wantEvents {
				t.Errorf("events %q, want %q", got, tc.wantEvents)
			}
			for _, want := range []string{tc.evidence, "via gofish (redfish)", "tls verified against caBundle"} {
				if !strings.Contains(res.Evidence, want) {
					t.Errorf("evidence lacks %q", want)
				}
			}
			checkNoSecret(t, "evidence", res.Evidence)
			if n := s.OpenSessions(); n != 0 {
				t.Errorf("%d redfish sessions left open", n)
			}
		})
	}
}

func TestRedfishStatus(t *testing.T) {
	t.Parallel()
	s := startRedfish(t, redfish.Options{})
	for _, on := range []bool{true, false, true} {
		if err := s.SetPower("1", on); err != nil {
			t.Fatal(err)
		}
		res, err := ipmi.New().Status(fixture.CallCtx(t, 10*time.Second), redfishRequest(s))
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if want := map[bool]plugin.PowerState{true: plugin.StateOn, false: plugin.StateOff}[on]; res.State != want {
			t.Errorf("status %q after SetPower(%v)", res.State, on)
		}
	}
	if got := rfEvents(t, s, "1"); got != "sim:on,sim:off,sim:on" {
		t.Errorf("status changed power: events %q", got)
	}
}

// TestRedfishTransitional: PoweringOff still has power and must not verify off.
func TestRedfishTransitional(t *testing.T) {
	t.Parallel()
	s := startRedfish(t, redfish.Options{TransitionDelay: 400 * time.Millisecond})
	start := time.Now()
	res, err := ipmi.New().Fence(fixture.CallCtx(t, 10*time.Second), redfishRequest(s), plugin.ActionOff)
	if err != nil {
		t.Fatalf("fence: %v", err)
	}
	t.Logf("evidence: %s", res.Evidence)
	if elapsed := time.Since(start); elapsed < 400*time.Millisecond {
		t.Errorf("verified off after %s, before the transition ended", elapsed)
	}
	if rfOn(t, s, "1") || res.State != plugin.StateOff {
		t.Errorf("on=%v state=%s", rfOn(t, s, "1"), res.State)
	}

	req := redfishRequest(s)
	req.Params[ipmi.ParamVerifyTimeout] = "200ms"
	res, err = ipmi.New().Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOn)
	if err == nil || res.State == plugin.StateOn {
		t.Fatalf("on verified while PoweringOn: %+v", res)
	}
	if !strings.Contains(err.Error(), "still reports unknown") {
		t.Errorf("error %v", err)
	}
}

func TestRedfishBadCredentials(t *testing.T) {
	t.Parallel()
	s := startRedfish(t, redfish.Options{})
	tests := map[string]map[string]string{
		"wrong password": {ipmi.SecretUsername: s.User(), ipmi.SecretPassword: "Wr0ng-" + testPassword},
		"unknown user":   {ipmi.SecretUsername: "nobody", ipmi.SecretPassword: testPassword},
	}
	for name, secrets := range tests {
		t.Run(name, func(t *testing.T) {
			req := redfishRequest(s)
			req.Secrets = secrets
			res, err := ipmi.New().Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff)
			if err == nil {
				t.Fatal("fence with bad credentials succeeded")
			}
			t.Logf("error: %v", err)
			if k := plugin.KindOf(err); k != plugin.KindPermanent {
				t.Errorf("kind %s, want Permanent", k)
			}
			if !strings.Contains(err.Error(), "check the BMC credentials") {
				t.Errorf("error does not say what to check: %v", err)
			}
			checkNoSecret(t, "error", err.Error()+res.Evidence)
			if strings.Contains(err.Error(), secrets[ipmi.SecretPassword]) {
				t.Errorf("error contains the wrong password")
			}
			if res.State != plugin.StateUnknown {
				t.Errorf("state %q, want unknown", res.State)
			}
		})
	}
	if !rfOn(t, s, "1") || rfEvents(t, s, "1") != "" || s.OpenSessions() != 0 {
		t.Errorf("server changed by rejected calls: events %q sessions %d", rfEvents(t, s, "1"), s.OpenSessions())
	}
}

// freeTCPPort returns a port nothing listens on.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func TestRedfishUnreachable(t *testing.T) {
	t.Parallel()
	// A listener that never accepts: the kernel completes the TCP handshake and the TLS
	// handshake then hangs, like a BMC whose web server is wedged.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	tests := map[string]struct {
		port     int
		timeout  string
		deadline time.Duration
	}{
		"refused":                {port: freeTCPPort(t), timeout: "2s", deadline: 5 * time.Second},
		"silent, per-call limit": {port: silent.Addr().(*net.TCPAddr).Port, timeout: "1s", deadline: 10 * time.Second},
		"silent, short deadline": {port: silent.Addr().(*net.TCPAddr).Port, timeout: "10s", deadline: 1 * time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			req := plugin.Request{Node: "node-x", Target: fmt.Sprintf("127.0.0.1:%d", tc.port),
				Params:  map[string]string{ipmi.ParamProtocol: ipmi.ProviderRedfish, ipmi.ParamTimeout: tc.timeout},
				Secrets: map[string]string{ipmi.SecretUsername: "admin", ipmi.SecretPassword: testPassword}}
			start := time.Now()
			_, err := ipmi.New().Fence(fixture.CallCtx(t, tc.deadline), req, plugin.ActionOff)
			elapsed := time.Since(start)
			if err == nil {
				t.Fatal("fence of an unreachable bmc succeeded")
			}
			t.Logf("after %s: %v", elapsed.Round(time.Millisecond), err)
			if k := plugin.KindOf(err); k != plugin.KindTargetUnreachable {
				t.Errorf("kind %s, want TargetUnreachable", k)
			}
			if limit := tc.deadline + time.Second; elapsed > limit {
				t.Errorf("returned after %s, limit %s", elapsed, limit)
			}
			checkNoSecret(t, "error", err.Error())
		})
	}
}

// TestRedfishBrokenBMCNeverSucceeds: a system that acknowledges ForceOff and stays on.
func TestRedfishBrokenBMCNeverSucceeds(t *testing.T) {
	t.Parallel()
	s := startRedfish(t, redfish.Options{Systems: []redfish.SystemOptions{{ID: "1", PoweredOn: true, IgnorePowerOff: true}}})
	req := redfishRequest(s)
	req.Params[ipmi.ParamVerifyTimeout] = "500ms"
	for _, action := range []plugin.Action{plugin.ActionOff, plugin.ActionReboot} {
		t.Run(string(action), func(t *testing.T) {
			res, err := ipmi.New().Fence(fixture.CallCtx(t, 10*time.Second), req, action)
			if err == nil {
				t.Fatalf("fence %s of a BMC that ignores ForceOff succeeded: %+v", action, res)
			}
			t.Logf("error: %v", err)
			if k := plugin.KindOf(err); k != plugin.KindNotVerified {
				t.Errorf("kind %s, want NotVerified", k)
			}
			if !strings.Contains(err.Error(), "still reports on") || res.State != plugin.StateOn {
				t.Errorf("error %q / state %q do not report the last state read", err, res.State)
			}
		})
	}
	if got := rfEvents(t, s, "1"); got != "bmc:ignored-off,bmc:ignored-off" || !rfOn(t, s, "1") {
		t.Errorf("events %q, want two ignored-off and power on", got)
	}
}

// TestRedfishTLS: a certificate the agent cannot verify is refused before any
// credentials are sent, unless insecure=true says otherwise.
func TestRedfishTLS(t *testing.T) {
	t.Parallel()
	s := startRedfish(t, redfish.Options{})
	other, err := redfish.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		params  map[string]string
		wantErr bool
		evid    string
	}{
		"system roots":   {params: map[string]string{}, wantErr: true},
		"another CA":     {params: map[string]string{ipmi.ParamCABundle: string(other.PEM())}, wantErr: true},
		"insecure=false": {params: map[string]string{ipmi.ParamInsecure: "false"}, wantErr: true},
		"insecure=true":  {params: map[string]string{ipmi.ParamInsecure: "true"}, evid: "tls NOT verified (insecure=true)"},
		"its own CA":     {params: map[string]string{ipmi.ParamCABundle: string(s.CAPEM())}, evid: "tls verified against caBundle"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			req := redfishRequest(s)
			delete(req.Params, ipmi.ParamCABundle)
			for k, v := range tc.params {
				req.Params[k] = v
			}
			before := s.OpenSessions()
			res, err := ipmi.New().Status(fixture.CallCtx(t, 10*time.Second), req)
			if !tc.wantErr {
				if err != nil || res.State != plugin.StateOn || !strings.Contains(res.Evidence, tc.evid) {
					t.Fatalf("status = %+v, %v", res, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("untrusted certificate accepted: %+v", res)
			}
			t.Logf("error: %v", err)
			if k := plugin.KindOf(err); k != plugin.KindPermanent || !strings.Contains(err.Error(), ipmi.ParamCABundle) {
				t.Errorf("kind %s, want Permanent naming %s: %v", k, ipmi.ParamCABundle, err)
			}
			if s.OpenSessions() != before {
				t.Error("a session was created over an unverified connection")
			}
		})
	}
}

func TestRedfishSystemName(t *testing.T) {
	t.Parallel()
	s := startRedfish(t, redfish.Options{Systems: []redfish.SystemOptions{{ID: "a", PoweredOn: true}, {ID: "b", PoweredOn: true}}})
	req := redfishRequest(s)
	_, err := ipmi.New().Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff)
	if err == nil || plugin.KindOf(err) != plugin.KindPermanent || !strings.Contains(err.Error(), ipmi.ParamSystemName) {
		t.Fatalf("fence without systemName on two systems: %v, want Permanent naming %s", err, ipmi.ParamSystemName)
	}
	req.Params[ipmi.ParamSystemName] = "b"
	if _, err := ipmi.New().Fence(fixture.CallCtx(t, 10*time.Second), req, plugin.ActionOff); err != nil {
		t.Fatalf("fence b: %v", err)
	}
	if !rfOn(t, s, "a") || rfOn(t, s, "b") {
		t.Errorf("a on=%v b on=%v, want only b off", rfOn(t, s, "a"), rfOn(t, s, "b"))
	}
}

// TestProviderFallback: Redfish down, IPMI up; the fence succeeds over IPMI and the
// evidence says Redfish was tried first and why it failed.
func TestProviderFallback(t *testing.T) {
	t.Parallel()
	sim := startBMC(t, bmc.IPMIOptions{PoweredOn: true})
	req := requestFor(sim)
	req.Target = sim.Host()
	req.Params[ipmi.ParamProviders] = "redfish,ipmi"
	req.Params[ipmi.ParamPort] = fmt.Sprint(sim.Port())
	req.Params[ipmi.ParamRedfishPort] = fmt.Sprint(freeTCPPort(t))
	res, err := ipmi.New().Fence(fixture.CallCtx(t, 15*time.Second), req, plugin.ActionOff)
	if err != nil {
		t.Fatalf("fence: %v", err)
	}
	t.Logf("evidence: %s", res.Evidence)
	for _, want := range []string{"provider redfish failed (TargetUnreachable)", "connection refused", "via ipmitool (ipmi)", "verified"} {
		if !strings.Contains(res.Evidence, want) {
			t.Errorf("evidence lacks %q", want)
		}
	}
	if on, _ := sim.PoweredOn(); on || res.State != plugin.StateOff {
		t.Errorf("bmc on=%v state=%s", on, res.State)
	}

	// Both down: the error names both, and the mixed kinds make it retryable.
	req.Params[ipmi.ParamProviders] = "ipmi,redfish"
	req.Secrets = map[string]string{ipmi.SecretUsername: sim.User(), ipmi.SecretPassword: "Wr0ng-" + testPassword}
	_, err = ipmi.New().Fence(fixture.CallCtx(t, 15*time.Second), req, plugin.ActionOff)
	if err == nil {
		t.Fatal("fence succeeded with every provider failing")
	}
	t.Logf("error: %v", err)
	for _, want := range []string{"tried ipmi, redfish", "ipmi (bmc 127.0.0.1:", "Permanent", "redfish (bmc 127.0.0.1:", "TargetUnreachable"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q", want)
		}
	}
	if k := plugin.KindOf(err); k != plugin.KindRetryable {
		t.Errorf("kind %s, want Retryable for mixed failures", k)
	}
	checkNoSecret(t, "error", err.Error())
}

func TestRedfishRefusesDebugEnv(t *testing.T) {
	s := startRedfish(t, redfish.Options{})
	t.Setenv("DEBUG_BMCLIB", "true")
	_, err := ipmi.New().Status(fixture.CallCtx(t, 10*time.Second), redfishRequest(s))
	if err == nil || !strings.Contains(err.Error(), "DEBUG_BMCLIB") {
		t.Fatalf("status with DEBUG_BMCLIB=true: %v", err)
	}
	if s.Requests() != 0 {
		t.Errorf("%d requests reached the bmc", s.Requests())
	}
}
