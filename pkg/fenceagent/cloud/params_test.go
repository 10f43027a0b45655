package cloud

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/kubefence/kubefence/pkg/plugin"
)

func TestValidateNamesEveryBadParam(t *testing.T) {
	cases := map[string]struct {
		params    map[string]string
		wantNames []string
	}{
		"defaults": {params: nil},
		"all set": {params: map[string]string{ParamRegion: "us-gov-west-1", ParamEndpoint: "https://ec2.us-gov-west-1.amazonaws.com",
			ParamAuthURL: "https://keystone.example:5000/v3", ParamInterface: "internal", ParamLock: "true",
			ParamRefuseSelf: "true", ParamSelfInstanceID: "i-0123456789abcdef0", ParamVerifyTimeout: "90s", ParamPollInterval: "1s"}},
		"several bad": {
			params:    map[string]string{"bogus": "1", SecretPassword: "x", ParamVerifyTimeout: "soon", ParamInterface: "private"},
			wantNames: []string{"bogus", SecretPassword, ParamVerifyTimeout, ParamInterface},
		},
	}
	a := testAgent()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := a.Validate(context.Background(), tc.params)
			if len(tc.wantNames) == 0 {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if err == nil || plugin.KindOf(err) != plugin.KindPermanent {
				t.Fatalf("validate = %v, want a permanent error", err)
			}
			for _, n := range tc.wantNames {
				if !strings.Contains(err.Error(), n+":") {
					t.Errorf("error %q does not name %s", err, n)
				}
			}
		})
	}
}

func TestParseTarget(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    target
		wantErr string
	}{
		"aws":              {in: "aws:///us-east-1a/i-0123456789abcdef0", want: target{providerAWS, "us-east-1a", "i-0123456789abcdef0"}},
		"aws short id":     {in: "aws:///eu-west-1c/i-01234567", want: target{providerAWS, "eu-west-1c", "i-01234567"}},
		"openstack":        {in: "openstack:///" + srvID, want: target{providerOpenStack, "", srvID}},
		"openstack region": {in: "openstack://RegionOne/" + srvID, want: target{providerOpenStack, "RegionOne", srvID}},
		"aws no zone":      {in: "aws:///i-0123456789abcdef0", wantErr: "not aws:///"},
		"aws bad id":       {in: "aws:///us-east-1a/vol-0123456789", wantErr: "not an instance ID"},
		"aws bad zone":     {in: "aws:///nowhere/i-0123456789abcdef0", wantErr: "not an availability zone"},
		"aws host":         {in: "aws://x/us-east-1a/i-0123456789abcdef0", wantErr: "not aws:///"},
		"openstack empty":  {in: "openstack:///", wantErr: "not openstack:///"},
		"openstack nested": {in: "openstack:///a/b", wantErr: "not openstack:///"},
		"gce":              {in: "gce://project/zone/name", wantErr: `unknown provider "gce"`},
		"no scheme":        {in: "i-0123456789abcdef0", wantErr: "not a providerID"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseTarget(tc.in)
			if tc.wantErr != "" {
				if err == nil || plugin.KindOf(err) != plugin.KindPermanent || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseTarget(%q) = %+v, %v; want a permanent error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseTarget(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestRegionOf(t *testing.T) {
	for zone, want := range map[string]string{
		"us-east-1a":             "us-east-1",
		"eu-central-1c":          "eu-central-1",
		"us-gov-west-1a":         "us-gov-west-1",
		"us-west-2-lax-1a":       "us-west-2",
		"us-east-1-wl1-bos-wlz1": "us-east-1",
		"ap-southeast-4b":        "ap-southeast-4",
		"":                       "",
	} {
		if got := regionOf(zone); got != want {
			t.Errorf("regionOf(%q) = %q, want %q", zone, got, want)
		}
	}
}

func TestStateMaps(t *testing.T) {
	ec2Cases := map[types.InstanceStateName]observation{
		"running":       {power: plugin.StateOn, raw: "running"},
		"pending":       {power: plugin.StateOn, raw: "pending", transitional: true},
		"stopping":      {power: plugin.StateUnknown, raw: "stopping", transitional: true},
		"stopped":       {power: plugin.StateOff, raw: "stopped"},
		"shutting-down": {power: plugin.StateUnknown, raw: "shutting-down", transitional: true},
		"terminated":    {power: plugin.StateOff, raw: "terminated", gone: true},
		"weird":         {power: plugin.StateUnknown, raw: "weird"},
	}
	for in, want := range ec2Cases {
		if got := ec2Observation(in); got != want {
			t.Errorf("ec2 %s = %+v, want %+v", in, got, want)
		}
	}
	novaCases := map[[2]string]observation{
		{"ACTIVE", ""}:             {power: plugin.StateOn, raw: "ACTIVE"},
		{"ACTIVE", "powering-off"}: {power: plugin.StateOn, raw: "ACTIVE (task powering-off)", transitional: true},
		{"SHUTOFF", ""}:            {power: plugin.StateOff, raw: "SHUTOFF"},
		{"SHELVED_OFFLOADED", ""}:  {power: plugin.StateOff, raw: "SHELVED_OFFLOADED"},
		{"PAUSED", ""}:             {power: plugin.StateOn, raw: "PAUSED"},
		{"ERROR", ""}:              {power: plugin.StateUnknown, raw: "ERROR"},
		{"BUILD", "spawning"}:      {power: plugin.StateOn, raw: "BUILD (task spawning)", transitional: true},
	}
	for in, want := range novaCases {
		if got := novaObservation(in[0], in[1]); got != want {
			t.Errorf("nova %v = %+v, want %+v", in, got, want)
		}
	}
}

func TestDescribeAndUnsupportedAction(t *testing.T) {
	a := testAgent(WithVersion("1.2.3"))
	d, err := a.Describe(context.Background())
	if err != nil || d.Name != Name || d.Version != "1.2.3" || len(d.Actions) != 3 {
		t.Fatalf("describe = %+v, %v", d, err)
	}
	secret := map[string]bool{}
	for _, p := range d.Params {
		secret[p.Name] = p.Secret
	}
	for _, s := range []string{SecretAccessKeyID, SecretSecretAccessKey, SecretSessionToken, SecretPassword, SecretApplicationCredentialSecret} {
		if !secret[s] {
			t.Errorf("%s is not described as secret", s)
		}
	}
	_, err = a.Fence(context.Background(), plugin.Request{Target: "aws:///us-east-1a/i-0123456789abcdef0"}, "dance")
	if plugin.KindOf(err) != plugin.KindUnsupported {
		t.Errorf("fence dance = %v, want unsupported", err)
	}
}
