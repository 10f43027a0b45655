package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// validatingAgent answers Validate with err.
type validatingAgent struct {
	funcAgent
	err error
}

func (a *validatingAgent) Validate(context.Context, map[string]string) error { return a.err }

// agentsByName hands out agents by name; a name with no agent fails to start with its error.
type agentsByName struct {
	agents    map[string]plugin.Agent
	launchErr map[string]error
}

func (s agentsByName) Agent(name string) (plugin.Agent, error) {
	if err := s.launchErr[name]; err != nil {
		return nil, err
	}
	return s.agents[name], nil
}

// TestValidateAgents: what an agent refuses for good (Permanent) stops the configuration;
// an agent that does not answer, remote or local, is only reported.
func TestValidateAgents(t *testing.T) {
	cfg := &v1alpha1.Config{}
	for _, name := range []string{"ok", "bad-param", "remote-down", "slow-start", "bad-checksum"} {
		a := v1alpha1.Agent{Name: name, Target: v1alpha1.TargetSource{Annotation: "bmc"}}
		if name == "remote-down" {
			a.Address = "agent.example:9443"
		}
		cfg.Agents = append(cfg.Agents, a)
	}
	src := agentsByName{
		agents: map[string]plugin.Agent{
			"ok":        &validatingAgent{},
			"bad-param": &validatingAgent{err: plugin.Errorf(plugin.KindPermanent, "invalid parameters: cipherSuite: \"99\" is not a cipher suite ID (0-17)")},
		},
		launchErr: map[string]error{
			"remote-down":  fmt.Errorf("agent remote-down: dial: %w", plugin.ErrAgentDied),
			"slow-start":   errors.New("agent slow-start: launch: timeout while waiting for plugin to start"),
			"bad-checksum": fmt.Errorf("agent bad-checksum: %w", &plugin.Error{Kind: plugin.KindPermanent, Message: "checksum mismatch"}),
		},
	}
	got := ValidateAgents(context.Background(), cfg, src)
	names := func(errs []error) string {
		var out []string
		for _, e := range errs {
			out = append(out, strings.SplitN(e.Error(), ":", 2)[0])
		}
		return strings.Join(out, ", ")
	}
	if n := names(got.Invalid); n != "agents[1] (bad-param), agents[4] (bad-checksum)" {
		t.Errorf("invalid: %s", n)
	}
	if n := names(got.Unreachable); n != "agents[2] (remote-down), agents[3] (slow-start)" {
		t.Errorf("unreachable: %s", n)
	}
	if got.Err() == nil || !strings.Contains(got.Err().Error(), `cipherSuite: "99"`) {
		t.Errorf("Err() = %v, want it to name the parameter", got.Err())
	}
}
