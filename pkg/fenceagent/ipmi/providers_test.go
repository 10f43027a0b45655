package ipmi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/stmcginnis/gofish/common"
)

func TestValidateProviders(t *testing.T) {
	ipmitoolInPath(t)
	tests := map[string]struct {
		params  map[string]string
		wantErr []string
	}{
		"redfish":           {params: map[string]string{"protocol": "redfish", "redfishPort": "8443", "systemName": "System.Embedded.1"}},
		"fallback list":     {params: map[string]string{"providers": " Redfish , ipmi"}},
		"insecure":          {params: map[string]string{"protocol": "redfish", "insecure": "true"}},
		"bad protocol":      {params: map[string]string{"protocol": "snmp"}, wantErr: []string{`protocol: "snmp" is not a provider`}},
		"bad list entry":    {params: map[string]string{"providers": "redfish,"}, wantErr: []string{`providers: "" is not a provider`}},
		"duplicate":         {params: map[string]string{"providers": "ipmi,IPMI"}, wantErr: []string{`providers: "ipmi" is listed twice`}},
		"redfish port":      {params: map[string]string{"redfishPort": "x"}, wantErr: []string{`redfishPort: "x" is not a port number`}},
		"insecure not bool": {params: map[string]string{"insecure": "yes please"}, wantErr: []string{`insecure: "yes please" is not true or false`}},
		"bundle not pem":    {params: map[string]string{"caBundle": "hello"}, wantErr: []string{"caBundle: no PEM certificate found"}},
		"bundle with a key": {params: map[string]string{"caBundle": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}, wantErr: []string{"caBundle: PEM block 1 is a PRIVATE KEY"}},
		"bundle and insecure": {params: map[string]string{"caBundle": "hello", "insecure": "true"},
			wantErr: []string{"caBundle: no PEM", "insecure: is true together with caBundle"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := New().Validate(context.Background(), tc.params)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			if err == nil || plugin.KindOf(err) != plugin.KindPermanent {
				t.Fatalf("err %v, want a Permanent error", err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}

func TestTargetPortAndProviders(t *testing.T) {
	req := plugin.Request{Target: "bmc.example:8443", Params: map[string]string{"protocol": "redfish"},
		Secrets: map[string]string{SecretUsername: "u", SecretPassword: "p"}}
	p, err := parseRequest(req)
	if err != nil || p.redfishPort != 8443 || p.port != 623 {
		t.Fatalf("redfish target port: %+v, %v", p, err)
	}
	req.Params = map[string]string{"providers": "redfish,ipmi"}
	if _, err := parseRequest(req); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("a target port with two providers: %v", err)
	}
}

func TestParseRedfishState(t *testing.T) {
	for raw, want := range map[string]plugin.PowerState{
		"On": plugin.StateOn, "Off": plugin.StateOff, " off ": plugin.StateOff, "Paused": plugin.StateOn,
		"PoweringOff": plugin.StateUnknown, "PoweringOn": plugin.StateUnknown, "": plugin.StateUnknown,
		"Chassis Power is off": plugin.StateUnknown,
	} {
		if got := parseRedfishState(raw); got != want {
			t.Errorf("parseRedfishState(%q) = %s, want %s", raw, got, want)
		}
	}
}

func TestClassifyRedfish(t *testing.T) {
	p := params{username: "operator", password: "hunter22"}
	rf := func(status int, body string) error {
		return fmt.Errorf("provider: gofish: %w", common.ConstructError(status, []byte(body)))
	}
	tests := map[string]struct {
		err  error
		want plugin.ErrorKind
	}{
		"401":              {rf(401, `{"error":{"message":"bad password hunter22"}}`), plugin.KindPermanent},
		"403":              {rf(403, "{}"), plugin.KindPermanent},
		"503 busy":         {rf(503, "busy"), plugin.KindRetryable},
		"409 conflict":     {rf(409, "in progress"), plugin.KindRetryable},
		"status as text":   {errors.New("1 error occurred:\n\t* provider: gofish: 401: {}\n"), plugin.KindPermanent},
		"unknown ca":       {fmt.Errorf("get: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), plugin.KindPermanent},
		"plain http port":  {errors.New(`http: server gave HTTP response to HTTPS client`), plugin.KindPermanent},
		"refused":          {errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), plugin.KindTargetUnreachable},
		"deadline":         {fmt.Errorf("open: %w", context.DeadlineExceeded), plugin.KindTargetUnreachable},
		"reset by peer":    {errors.New("read: connection reset by peer"), plugin.KindTargetUnreachable},
		"several systems":  {errors.New("no matching redfish system found for system: "), plugin.KindPermanent},
		"something else":   {errors.New("json: cannot unmarshal"), plugin.KindRetryable},
		"echoed user name": {errors.New("operator is locked out"), plugin.KindRetryable},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := classify(tc.err, "open bmc", ProviderRedfish, p)
			if k := plugin.KindOf(err); k != tc.want {
				t.Errorf("kind %s, want %s: %v", k, tc.want, err)
			}
			if strings.Contains(err.Error(), "hunter22") || strings.Contains(err.Error(), "operator") {
				t.Errorf("secret in error: %v", err)
			}
		})
	}
}

func TestCombinedKind(t *testing.T) {
	for _, tc := range []struct {
		kinds []plugin.ErrorKind
		want  plugin.ErrorKind
	}{
		{[]plugin.ErrorKind{plugin.KindPermanent}, plugin.KindPermanent},
		{[]plugin.ErrorKind{plugin.KindTargetUnreachable, plugin.KindTargetUnreachable}, plugin.KindTargetUnreachable},
		{[]plugin.ErrorKind{plugin.KindTargetUnreachable, plugin.KindPermanent}, plugin.KindRetryable},
	} {
		if got := combinedKind(tc.kinds); got != tc.want {
			t.Errorf("combinedKind(%v) = %s, want %s", tc.kinds, got, tc.want)
		}
	}
}
