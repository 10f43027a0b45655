package app

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fenceagent/cloud"
	"github.com/kubefence/kubefence/pkg/fenceagent/ipmi"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// fakeAgent is a plugin.Agent of function fields; Describe and Validate are what the
// check calls.
type fakeAgent struct {
	plugin.Agent
	describe func() (plugin.Description, error)
	validate func(map[string]string) error
}

func (f fakeAgent) Describe(context.Context) (plugin.Description, error) { return f.describe() }
func (f fakeAgent) Validate(_ context.Context, p map[string]string) error {
	return f.validate(p)
}

type fakeFinder map[string]func() (plugin.Agent, error)

func (f fakeFinder) Agent(name string) (plugin.Agent, error) { return f[name]() }

var bmcParams = []plugin.Param{
	{Name: "cipherSuite", Type: plugin.ParamString},
	{Name: "username", Type: plugin.ParamString, Secret: true, Required: true},
	{Name: "password", Type: plugin.ParamString, Secret: true, Required: true},
}

func TestCheckConfiguredAgents(t *testing.T) {
	ok := func(map[string]string) error { return nil }
	describe := func(params ...plugin.Param) func() (plugin.Description, error) {
		return func() (plugin.Description, error) {
			return plugin.Description{Name: "fence-agent-x", Params: params}, nil
		}
	}
	secret := &v1alpha1.SecretRef{Namespace: "kubefence-system", Name: "bmc"}
	for name, tc := range map[string]struct {
		agent           fakeAgent
		findErr         error
		secretRef       *v1alpha1.SecretRef
		wantInvalid     string
		wantUnreachable string
	}{
		"required secrets and a secretRef": {agent: fakeAgent{describe: describe(bmcParams...), validate: ok}, secretRef: secret},
		"required secrets without a secretRef": {agent: fakeAgent{describe: describe(bmcParams...), validate: ok},
			wantInvalid: "agents[0].secretRef: Required value: agent a (fence-agent-x) needs the secret parameters username, password: name the Secret that holds them"},
		"optional secrets without a secretRef": {agent: fakeAgent{describe: describe(plugin.Param{Name: "accessKeyID", Secret: true}), validate: ok}},
		"parameters refused by name": {agent: fakeAgent{describe: describe(bmcParams...), validate: func(map[string]string) error {
			return plugin.InvalidParams([]plugin.ParamError{{Name: "cipherSuite", Detail: `"99" is not a cipher suite ID (0-17)`}, {Name: "colour", Detail: "unknown parameter"}})
		}}, secretRef: secret,
			wantInvalid: `[agents[0].params.cipherSuite: Invalid value: "99" is not a cipher suite ID (0-17) (agent a), agents[0].params.colour: Invalid value: unknown parameter (agent a)]`},
		"a refusal of no parameter": {agent: fakeAgent{describe: describe(), validate: func(map[string]string) error {
			return plugin.Errorf(plugin.KindPermanent, "provider ipmi needs the ipmitool binary")
		}}, wantInvalid: "agents[0]: Invalid value: agent a: Permanent: provider ipmi needs the ipmitool binary"},
		"a binary refused at launch": {findErr: plugin.Errorf(plugin.KindPermanent, "sha256 mismatch"),
			wantInvalid: "agents[0]: Invalid value: agent a: Permanent: sha256 mismatch"},
		"an agent that does not answer": {agent: fakeAgent{describe: describe(bmcParams...), validate: func(map[string]string) error {
			return plugin.Errorf(plugin.KindTargetUnreachable, "dial tcp: connection refused")
		}}, wantUnreachable: "agents[0] (a): TargetUnreachable: dial tcp: connection refused"},
		"an agent that dies on Describe": {agent: fakeAgent{describe: func() (plugin.Description, error) {
			return plugin.Description{}, errors.New("agent process died")
		}, validate: ok}, wantUnreachable: "agents[0] (a): agent process died"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := &v1alpha1.Config{Agents: []v1alpha1.Agent{{Name: "a", SecretRef: tc.secretRef}}}
			agents := fakeFinder{"a": func() (plugin.Agent, error) { return tc.agent, tc.findErr }}
			got := checkConfiguredAgents(context.Background(), cfg, agents)
			invalid := ""
			if len(got.Invalid) > 0 {
				invalid = got.Invalid.ToAggregate().Error()
			}
			if invalid != tc.wantInvalid {
				t.Errorf("invalid:\n%s\nwant:\n%s", invalid, tc.wantInvalid)
			}
			unreachable := errors.Join(got.Unreachable...)
			if (unreachable == nil) != (tc.wantUnreachable == "") || unreachable != nil && !strings.Contains(unreachable.Error(), tc.wantUnreachable) {
				t.Errorf("unreachable: %v, want %q", unreachable, tc.wantUnreachable)
			}
		})
	}
}

// TestTheAgentsSayWhatTheyNeed: the BMC agent (IPMI and Redfish alike) requires its
// credentials, the cloud agent does not (a pod identity may do): the rule follows what
// each agent's Describe says, not a list kept here.
func TestTheAgentsSayWhatTheyNeed(t *testing.T) {
	for name, tc := range map[string]struct {
		agent  plugin.Agent
		params map[string]string
		want   string
	}{
		"ipmi": {ipmi.New(), map[string]string{"cipherSuite": "99"}, `[agents[0].params.cipherSuite: Invalid value: "99" is not a cipher suite ID (0-17) (agent a), ` +
			"agents[0].secretRef: Required value: agent a (ipmi) needs the secret parameters username, password: name the Secret that holds them]"},
		"redfish": {ipmi.New(), map[string]string{"protocol": "redfish"},
			"agents[0].secretRef: Required value: agent a (ipmi) needs the secret parameters username, password: name the Secret that holds them"},
		"cloud": {cloud.New(), map[string]string{"region": "eu-west-1"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := &v1alpha1.Config{Agents: []v1alpha1.Agent{{Name: "a", Params: tc.params}}}
			got := checkConfiguredAgents(context.Background(), cfg, fakeFinder{"a": func() (plugin.Agent, error) { return tc.agent, nil }})
			invalid := ""
			if len(got.Invalid) > 0 {
				invalid = got.Invalid.ToAggregate().Error()
			}
			if invalid != tc.want || len(got.Unreachable) > 0 {
				t.Errorf("invalid:\n%s\nwant:\n%s\nunreachable: %v", invalid, tc.want, got.Unreachable)
			}
		})
	}
}
