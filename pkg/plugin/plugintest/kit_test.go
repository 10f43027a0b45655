package plugintest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/plugin/plugintest"
)

const memPassword = "mem-password-0c7e41"

// memAgent is an in-memory agent whose "peer" is a map the test reads directly.
type memAgent struct {
	mu    sync.Mutex
	power map[string]plugin.PowerState
}

func (a *memAgent) Describe(context.Context) (plugin.Description, error) {
	return plugin.Description{
		Name:    "mem",
		Version: "1.0.0",
		Actions: []plugin.Action{plugin.ActionOff, plugin.ActionOn},
		Params: []plugin.Param{
			{Name: "zone", Type: plugin.ParamString, Default: "a"},
			{Name: "password", Type: plugin.ParamString, Secret: true, Required: true},
		},
	}, nil
}

func (a *memAgent) Validate(_ context.Context, params map[string]string) error {
	for k, v := range params {
		if k != "zone" {
			return plugin.Errorf(plugin.KindPermanent, "%s: unknown parameter", k)
		}
		if v == "" {
			return plugin.Errorf(plugin.KindPermanent, "zone: must not be empty")
		}
	}
	return nil
}

func (a *memAgent) set(ctx context.Context, req plugin.Request, st plugin.PowerState) (plugin.Result, error) {
	if err := ctx.Err(); err != nil {
		return plugin.Result{}, fmt.Errorf("set %s %s: %w", req.Target, st, err)
	}
	if req.Secrets["password"] != memPassword {
		return plugin.Result{}, plugin.Errorf(plugin.KindPermanent, "password: rejected")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.power[req.Target] = st
	return plugin.Result{State: st, Evidence: fmt.Sprintf("%s set %s and read back", req.Target, st)}, nil
}

func (a *memAgent) Fence(ctx context.Context, req plugin.Request, action plugin.Action) (plugin.Result, error) {
	if action != plugin.ActionOff && action != plugin.ActionOn {
		return plugin.Result{}, plugin.Errorf(plugin.KindUnsupported, "action %q", action)
	}
	return a.set(ctx, req, plugin.PowerState(action))
}

func (a *memAgent) Status(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	if err := ctx.Err(); err != nil {
		return plugin.Result{}, fmt.Errorf("status %s: %w", req.Target, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.power[req.Target]
	return plugin.Result{State: st, Evidence: "read " + string(st)}, nil
}

func (a *memAgent) Unfence(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	return a.set(ctx, req, plugin.StateOn)
}

func TestConformanceInMemoryAgent(t *testing.T) {
	agent := &memAgent{power: map[string]plugin.PowerState{}}
	plugintest.Run(t, plugintest.Kit{
		Agent: agent,
		NewTarget: func(t *testing.T) plugintest.Target {
			name := "node-" + t.Name()
			agent.mu.Lock()
			agent.power[name] = plugin.StateOn
			agent.mu.Unlock()
			return plugintest.Target{
				Request: plugin.Request{
					Node: "node-1", Target: name,
					Params:  map[string]string{"zone": "b"},
					Secrets: map[string]string{"password": memPassword},
				},
				Observe: func() (plugin.PowerState, error) {
					agent.mu.Lock()
					defer agent.mu.Unlock()
					return agent.power[name], nil
				},
			}
		},
		BadParams: map[string]map[string]string{
			"unknown":    {"colour": "red"},
			"empty zone": {"zone": ""},
		},
		Secrets:     []string{memPassword},
		Unfenceable: true,
	})
}
