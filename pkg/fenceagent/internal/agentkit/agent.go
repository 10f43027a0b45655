package agentkit

import (
	"context"
	"slices"
	"strings"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// PowerActions are the actions of an agent that switches power: Power runs each.
var PowerActions = []plugin.Action{plugin.ActionOff, plugin.ActionReboot, plugin.ActionOn}

// Base is the part of an agent that is the same in every agent: what Describe
// publishes. An Agent embeds it, which gives it Describe and Supports.
type Base struct {
	name    string
	version string
	actions []plugin.Action
	specs   []plugin.Param
}

// NewBase returns the Base of agent name, which accepts actions and the params that
// specs describe. Its version is "dev" until SetVersion.
func NewBase(name string, actions []plugin.Action, specs []plugin.Param) Base {
	return Base{name: name, version: "dev", actions: actions, specs: specs}
}

// SetVersion sets the version Describe reports; an agent's WithVersion option calls it.
func (b *Base) SetVersion(v string) { b.version = v }

// Describe lists the agent's actions and parameters, with defaults and which are
// secret. Actions and Params are copies, so that a caller changing the result cannot
// change the specs the agent validates against.
func (b *Base) Describe(context.Context) (plugin.Description, error) {
	return plugin.Description{
		Name:    b.name,
		Version: b.version,
		Actions: slices.Clone(b.actions),
		Params:  slices.Clone(b.specs),
	}, nil
}

// Supports returns nil for an action the agent accepts and an Unsupported error
// naming those it does accept otherwise. Agents ask it before they parse a request,
// so that an action they cannot take touches nothing.
func (b *Base) Supports(action plugin.Action) error {
	if slices.Contains(b.actions, action) {
		return nil
	}
	return unsupported(action, b.actions)
}

// unsupported says which actions there are instead, as "off, reboot or on".
func unsupported(action plugin.Action, actions []plugin.Action) error {
	words := make([]string, len(actions))
	for i, a := range actions {
		words[i] = string(a)
	}
	want := strings.Join(words, "")
	if len(words) > 1 {
		want = strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
	}
	return plugin.Errorf(plugin.KindUnsupported, "action %q is not supported; want %s", action, want)
}

// Validator is the Validate of an agent whose params are all it checks before a call:
// it runs the agent's parser of the params and contacts nothing. An agent that also
// checks its host (a tool on PATH, a script) writes its own Validate instead.
type Validator[P any] func(params map[string]string) (P, error)

// Validate returns the parser's error, which names every bad parameter, and drops what
// it parsed.
func (v Validator[P]) Validate(_ context.Context, params map[string]string) error {
	_, err := v(params)
	return err
}

// Apply calls each of an agent's options on it, in order, and returns it: the last step
// of every agent's New.
func Apply[A any, O ~func(*A)](a *A, opts []O) *A {
	for _, o := range opts {
		o(a)
	}
	return a
}

// Unknown is the result of a call that observed nothing: one refused before it
// reached the device.
func Unknown() plugin.Result { return plugin.Result{State: plugin.StateUnknown} }
