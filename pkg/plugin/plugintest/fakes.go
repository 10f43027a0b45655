package plugintest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// Machine is an agent whose one machine powers off when fenced and on when unfenced,
// whatever the target: a fake BMC for tests of what calls an agent, not of an agent. It
// records each call as "Method target".
type Machine struct {
	mu    sync.Mutex
	On    bool
	calls []string
	// FenceFunc, when set, answers Fence instead (a BMC that refuses, or hangs); the
	// machine goes off when it returns nil or the call's context ended.
	FenceFunc func(ctx context.Context) error
	// StatusFunc, when set, fails Status for the targets it returns an error for (a BMC
	// that does not answer).
	StatusFunc func(target string) error
	// Actions, when set, is what Describe offers (a storage fence offers no reboot);
	// default a power agent's.
	Actions []plugin.Action
	// ReadsOff are targets that read off whatever the machine does (another machine's
	// BMC, switched off).
	ReadsOff map[string]bool
	// ActsAfter, with Clock, makes a slow BMC: it acknowledges an off at once and the
	// machine goes off ActsAfter later on Clock.
	ActsAfter time.Duration
	Clock     func() time.Time
	offAt     time.Time
}

// TakeCalls returns the calls made since it was last asked, oldest first, and forgets them.
func (m *Machine) TakeCalls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.calls
	m.calls = nil
	return out
}

// Describe offers Actions.
func (m *Machine) Describe(context.Context) (plugin.Description, error) {
	actions := m.Actions
	if actions == nil {
		actions = []plugin.Action{plugin.ActionOff, plugin.ActionReboot, plugin.ActionOn}
	}
	return plugin.Description{Name: "machine", Actions: actions}, nil
}

// Validate takes any parameters.
func (m *Machine) Validate(context.Context, map[string]string) error { return nil }

func (m *Machine) record(call string, on, set bool) plugin.Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, call)
	switch {
	case set && !on && m.ActsAfter > 0:
		if m.offAt.IsZero() {
			m.offAt = m.Clock().Add(m.ActsAfter)
		}
	case set:
		m.On = on
	}
	if !m.offAt.IsZero() && !m.Clock().Before(m.offAt) {
		m.On, m.offAt = false, time.Time{}
	}
	st := plugin.StateOff
	if m.On {
		st = plugin.StateOn
	}
	return plugin.Result{State: st, Evidence: "power " + string(st)}
}

// Fence powers the machine off.
func (m *Machine) Fence(ctx context.Context, req plugin.Request, _ plugin.Action) (plugin.Result, error) {
	if m.FenceFunc != nil {
		err := m.FenceFunc(ctx)
		m.record("Fence "+req.Target, false, err == nil || ctx.Err() != nil)
		return plugin.Result{}, err
	}
	return m.record("Fence "+req.Target, false, true), nil
}

// Status reads the machine's power.
func (m *Machine) Status(_ context.Context, req plugin.Request) (plugin.Result, error) {
	res := m.record("Status "+req.Target, false, false)
	if m.ReadsOff[req.Target] {
		res = plugin.Result{State: plugin.StateOff, Evidence: "power off"}
	}
	if m.StatusFunc != nil {
		if err := m.StatusFunc(req.Target); err != nil {
			return plugin.Result{}, err
		}
	}
	return res, nil
}

// Unfence powers the machine on.
func (m *Machine) Unfence(_ context.Context, req plugin.Request) (plugin.Result, error) {
	return m.record("Unfence "+req.Target, true, true), nil
}

// Funcs is an agent made of function fields; a nil field fails its call (Validate
// passes). It records the methods called.
type Funcs struct {
	ValidateFunc func(context.Context, map[string]string) error
	StatusFunc   func(context.Context, plugin.Request) (plugin.Result, error)
	UnfenceFunc  func(context.Context, plugin.Request) (plugin.Result, error)

	mu    sync.Mutex
	calls []string
}

// Calls returns the methods called so far.
func (a *Funcs) Calls() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...)
}

func (a *Funcs) called(method string) {
	a.mu.Lock()
	a.calls = append(a.calls, method)
	a.mu.Unlock()
}

// Describe offers off, reboot and on.
func (a *Funcs) Describe(context.Context) (plugin.Description, error) {
	return plugin.Description{Name: "funcs", Actions: []plugin.Action{plugin.ActionOff, plugin.ActionReboot, plugin.ActionOn}}, nil
}

// Validate calls ValidateFunc, or passes.
func (a *Funcs) Validate(ctx context.Context, params map[string]string) error {
	if a.ValidateFunc == nil {
		return nil
	}
	return a.ValidateFunc(ctx, params)
}

// Fence is not expected of a Funcs agent.
func (a *Funcs) Fence(context.Context, plugin.Request, plugin.Action) (plugin.Result, error) {
	a.called("Fence")
	return plugin.Result{}, fmt.Errorf("fence: not expected here")
}

// Status calls StatusFunc.
func (a *Funcs) Status(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	a.called("Status")
	if a.StatusFunc == nil {
		return plugin.Result{}, fmt.Errorf("status: not expected here")
	}
	return a.StatusFunc(ctx, req)
}

// Unfence calls UnfenceFunc.
func (a *Funcs) Unfence(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	a.called("Unfence")
	if a.UnfenceFunc == nil {
		return plugin.Result{}, fmt.Errorf("unfence: not expected here")
	}
	return a.UnfenceFunc(ctx, req)
}

// One hands out the same agent under every name.
type One struct{ A plugin.Agent }

// Agent returns the agent.
func (o One) Agent(string) (plugin.Agent, error) { return o.A, nil }

// ByName hands out agents by name; a name in Errs fails to start with its error.
type ByName struct {
	Agents map[string]plugin.Agent
	Errs   map[string]error
}

// Agent returns the named agent.
func (b ByName) Agent(name string) (plugin.Agent, error) {
	if err := b.Errs[name]; err != nil {
		return nil, err
	}
	a, ok := b.Agents[name]
	if !ok {
		return nil, fmt.Errorf("no agent %q", name)
	}
	return a, nil
}
