package agentcall

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/plugin/plugintest"
)

// refuses is an agent whose Validate answers err.
func refuses(err error) *plugintest.Funcs {
	return &plugintest.Funcs{ValidateFunc: func(context.Context, map[string]string) error { return err }}
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
	src := plugintest.ByName{
		Agents: map[string]plugin.Agent{
			"ok":        refuses(nil),
			"bad-param": refuses(plugin.Errorf(plugin.KindPermanent, "invalid parameters: cipherSuite: \"99\" is not a cipher suite ID (0-17)")),
		},
		Errs: map[string]error{
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
