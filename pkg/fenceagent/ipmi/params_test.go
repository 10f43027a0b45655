package ipmi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// ipmitoolInPath puts a stand-in ipmitool first in PATH for the test, so that Validate
// accepts the ipmi provider whether or not the machine has ipmitool.
func ipmitoolInPath(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ipmitool"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
}

func TestValidate(t *testing.T) {
	ipmitoolInPath(t)
	tests := map[string]struct {
		params map[string]string
		// wantErr lists substrings the error must hold; none means valid.
		wantErr []string
	}{
		"defaults":   {params: nil},
		"all set":    {params: map[string]string{"port": "6230", "cipherSuite": "17", "timeout": "2s", "verifyTimeout": "1m", "pollInterval": "1s"}},
		"bad port":   {params: map[string]string{"port": "abc"}, wantErr: []string{`port: "abc" is not a port number`}},
		"port zero":  {params: map[string]string{"port": "0"}, wantErr: []string{`port: "0" is not a port number`}},
		"port large": {params: map[string]string{"port": "70000"}, wantErr: []string{"port:"}},
		"cipher":     {params: map[string]string{"cipherSuite": "x"}, wantErr: []string{`cipherSuite: "x"`}},
		"operator":   {params: map[string]string{"privilegeLevel": "operator"}},
		"privilege too low": {params: map[string]string{"privilegeLevel": "USER"},
			wantErr: []string{`privilegeLevel: "USER"; want OPERATOR or ADMINISTRATOR (power control needs Operator)`}},
		"durations": {
			params:  map[string]string{"timeout": "5", "verifyTimeout": "-1s", "pollInterval": "0s"},
			wantErr: []string{"timeout: \"5\"", "verifyTimeout: \"-1s\"", "pollInterval: \"0s\""},
		},
		"poll longer than verify": {
			params:  map[string]string{"verifyTimeout": "1s", "pollInterval": "2s"},
			wantErr: []string{"pollInterval: 2s is longer than verifyTimeout 1s"},
		},
		"unknown name": {params: map[string]string{"prot": "623"}, wantErr: []string{"prot: unknown parameter"}},
		"secret in params": {
			params:  map[string]string{"username": "admin", "password": "x"},
			wantErr: []string{"username: is a secret", "password: is a secret"},
		},
		"every problem reported": {
			params:  map[string]string{"port": "abc", "bogus": "1"},
			wantErr: []string{"port:", "bogus:"},
		},
	}
	a := New()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := a.Validate(context.Background(), tc.params)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("valid params rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("invalid params accepted")
			}
			if plugin.KindOf(err) != plugin.KindPermanent {
				t.Errorf("kind %s, want Permanent", plugin.KindOf(err))
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

func TestSplitTarget(t *testing.T) {
	tests := map[string]struct {
		host    string
		port    int
		wantErr bool
	}{
		"10.0.0.5":            {host: "10.0.0.5"},
		"bmc.example:6230":    {host: "bmc.example", port: 6230},
		"[fd00::5]:623":       {host: "fd00::5", port: 623},
		"fd00::5":             {host: "fd00::5"},
		"":                    {wantErr: true},
		"-oops":               {wantErr: true},
		"bmc.example:abc":     {wantErr: true},
		"bmc.example:0":       {wantErr: true},
		":623":                {wantErr: true},
		"  bmc.example:623  ": {host: "bmc.example", port: 623},
	}
	for in, tc := range tests {
		t.Run(in, func(t *testing.T) {
			host, port, err := splitTarget(in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if host != tc.host || port != tc.port {
				t.Errorf("got %q %d, want %q %d", host, port, tc.host, tc.port)
			}
		})
	}
}

func TestParseRequest(t *testing.T) {
	req := plugin.Request{Target: "bmc:6230", Params: map[string]string{"port": "700"},
		Secrets: map[string]string{"username": "u", "password": "p"}}
	p, err := parseRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if p.port != 6230 || p.cipherSuite != "3" || p.timeout != 5*time.Second ||
		p.verifyTimeout != 20*time.Second || p.pollInterval != 250*time.Millisecond {
		t.Errorf("parsed %+v; want target port and defaults", p)
	}
	req.Secrets = nil
	_, err = parseRequest(req)
	if err == nil || plugin.KindOf(err) != plugin.KindPermanent || !strings.Contains(err.Error(), "username, password") {
		t.Errorf("missing secrets: err = %v", err)
	}
}

func TestParseState(t *testing.T) {
	tests := map[string]plugin.PowerState{
		"Chassis Power is on\n":                                     plugin.StateOn,
		"Chassis Power is off":                                      plugin.StateOff,
		"  CHASSIS   power IS   Off  \r\n":                          plugin.StateOff,
		"Loading IANA PEN Registry...\nChassis Power is on\n\n":     plugin.StateOn,
		"Chassis Power is on\nChassis Power is off\n":               plugin.StateUnknown,
		"Chassis Power is unknown":                                  plugin.StateUnknown,
		"Chassis Power is on, probably":                             plugin.StateUnknown,
		"":                                                          plugin.StateUnknown,
		"Error: Unable to establish IPMI v2 / RMCP+ session":        plugin.StateUnknown,
		"Set Chassis Power Control to Down/Off failed: Node busy\n": plugin.StateUnknown,
	}
	for in, want := range tests {
		if got := parseState(in); got != want {
			t.Errorf("parseState(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClassify(t *testing.T) {
	p := params{host: "h", port: 623, username: "operator", password: "hunter22"}
	tool := func(out string) error {
		return &toolError{command: "chassis power status", err: errors.New("exit status 1"), output: out}
	}
	tests := map[string]struct {
		err  error
		want plugin.ErrorKind
	}{
		"wrong password": {tool("> RAKP 2 HMAC is invalid\nError: Unable to establish IPMI v2 / RMCP+ session"), plugin.KindPermanent},
		"unknown user":   {tool("RAKP 2 message indicates an error : unauthorized name"), plugin.KindPermanent},
		"cipher":         {tool("Error in open session response message : invalid authentication algorithm"), plugin.KindPermanent},
		"no answer":      {tool("Get Auth Capabilities error\nError: Unable to establish IPMI v2 / RMCP+ session"), plugin.KindTargetUnreachable},
		// An Operator-only account asked for ADMINISTRATOR (privilegeLevel left at its default).
		"privilege level refused": {tool("Set Session Privilege Level to ADMINISTRATOR failed\nError: Unable to establish IPMI v2 / RMCP+ session"), plugin.KindPermanent},
		"role refused":            {tool("RAKP 2 message indicates an error : unauthorized role"), plugin.KindPermanent},
		"dns":                     {tool("Address lookup for x failed\nCould not open socket!"), plugin.KindTargetUnreachable},
		"deadline":                {context.DeadlineExceeded, plugin.KindTargetUnreachable},
		"busy":                    {tool("Set Chassis Power Control to Down/Off failed: Node busy"), plugin.KindRetryable},
		"already typed":           {plugin.Errorf(plugin.KindUnsupported, "nope"), plugin.KindUnsupported},
		"echoed password":         {tool("bad password hunter22 for operator"), plugin.KindPermanent},
		"secret in a path":        {errors.New("open /tmp/hunter22: no such file"), plugin.KindRetryable},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := classify(tc.err, "read power state", ProviderIPMI, p)
			if k := plugin.KindOf(err); k != tc.want {
				t.Errorf("kind %s, want %s: %v", k, tc.want, err)
			}
			if strings.Contains(err.Error(), "hunter22") || strings.Contains(err.Error(), "operator") {
				t.Errorf("secret in error: %v", err)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	d, err := New(WithVersion("1.2.3")).Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "ipmi" || d.Version != "1.2.3" || len(d.Actions) != 3 {
		t.Errorf("description %+v", d)
	}
	secret := map[string]bool{}
	defaults := map[string]string{}
	for _, p := range d.Params {
		secret[p.Name] = p.Secret
		defaults[p.Name] = p.Default
		if p.Type == "" || p.Description == "" {
			t.Errorf("param %s lacks type or description", p.Name)
		}
	}
	if !secret["username"] || !secret["password"] || secret["port"] {
		t.Errorf("secret flags %v", secret)
	}
	want := map[string]string{"port": "623", "cipherSuite": "3", "privilegeLevel": "ADMINISTRATOR", "timeout": "5s", "verifyTimeout": "20s", "pollInterval": "250ms"}
	for k, v := range want {
		if defaults[k] != v {
			t.Errorf("default of %s = %q, want %q", k, defaults[k], v)
		}
	}
}

// TestValidateNeedsIpmitool: a configuration that reaches BMCs with ipmitool is refused
// at load when the binary is not in PATH, with an error that names the agent, the
// tool and how to get it, rather than failing at the first fence.
func TestValidateNeedsIpmitool(t *testing.T) {
	empty := t.TempDir()
	ipmitoolInPath(t)
	withTool := os.Getenv("PATH")
	tests := map[string]struct {
		path   string
		agent  *Agent
		params map[string]string
		// wantErr is false when Validate must accept.
		wantErr bool
	}{
		"default protocol, no ipmitool": {path: empty, agent: New(), wantErr: true},
		"ipmi as fallback, no ipmitool": {path: empty, agent: New(), params: map[string]string{ParamProviders: "redfish,ipmi"}, wantErr: true},
		"explicit ipmi, no ipmitool":    {path: empty, agent: New(), params: map[string]string{ParamProtocol: "ipmi"}, wantErr: true},
		"redfish needs no ipmitool":     {path: empty, agent: New(), params: map[string]string{ParamProtocol: "redfish"}},
		"ipmitool in PATH":              {path: withTool, agent: New()},
		"client replaced":               {path: empty, agent: fakeAgent(&fakeClient{})},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("PATH", tc.path)
			err := tc.agent.Validate(context.Background(), tc.params)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted without ipmitool in PATH")
			}
			if plugin.KindOf(err) != plugin.KindPermanent {
				t.Errorf("kind %s, want Permanent: %v", plugin.KindOf(err), err)
			}
			for _, want := range []string{`agent "ipmi"`, "provider ipmi needs the ipmitool binary", "not found in PATH (" + tc.path + ")",
				"use the kubefence image, which carries it, or install ipmitool", "protocol=redfish"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
	// At a fence, the same error, still permanent: no retry installs a binary.
	t.Setenv("PATH", empty)
	_, err := New().Status(context.Background(), fakeRequest(nil))
	if plugin.KindOf(err) != plugin.KindPermanent || !strings.Contains(err.Error(), "needs the ipmitool binary") {
		t.Errorf("status without ipmitool: %v (kind %s), want a Permanent error naming ipmitool", err, plugin.KindOf(err))
	}
}
