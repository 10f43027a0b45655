package ipmi

import (
	"context"
	"slices"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// Name is the agent name Describe reports.
const Name = "ipmi"

// Agent fences nodes by chassis power through their BMC, over IPMI LAN or Redfish.
// It keeps no state between calls, so calls for different targets may run at once.
type Agent struct {
	// Base gives the agent its Describe.
	agentkit.Base
	// clients makes a PowerClient per provider name.
	clients map[string]ClientFunc
	// usesIpmitool is true while the IPMI client is NewIpmitoolClient, which runs the
	// ipmitool binary: Validate then requires it.
	usesIpmitool bool
}

// Option configures an Agent.
type Option func(*Agent)

// WithClientFunc replaces how the agent connects to a BMC over IPMI (default
// NewIpmitoolClient); Validate then no longer looks for ipmitool.
func WithClientFunc(f ClientFunc) Option {
	return func(a *Agent) { a.clients[ProviderIPMI], a.usesIpmitool = f, false }
}

// WithRedfishClientFunc replaces how the agent connects to a BMC over Redfish
// (default NewRedfishClient).
func WithRedfishClientFunc(f ClientFunc) Option {
	return func(a *Agent) { a.clients[ProviderRedfish] = f }
}

// WithVersion sets the version Describe reports.
func WithVersion(v string) Option { return func(a *Agent) { a.SetVersion(v) } }

// New returns a BMC agent.
func New(opts ...Option) *Agent {
	a := &Agent{
		Base:         agentkit.NewBase(Name, agentkit.PowerActions, paramSpecs),
		clients:      map[string]ClientFunc{ProviderIPMI: NewIpmitoolClient, ProviderRedfish: NewRedfishClient},
		usesIpmitool: true,
	}
	return agentkit.Apply(a, opts)
}

var _ plugin.Agent = (*Agent)(nil)

// Validate checks non-secret parameters without contacting any BMC. The error names
// every bad parameter. When the parameters use the ipmi provider, the ipmitool binary
// must be in PATH: a configuration that could not fence is refused when it is loaded,
// not at the first fence.
func (a *Agent) Validate(_ context.Context, params map[string]string) error {
	p, err := parseParams(params)
	if err != nil {
		return err
	}
	if a.usesIpmitool && slices.Contains(p.providers, ProviderIPMI) {
		if _, err := lookIpmitool(); err != nil {
			return err
		}
	}
	return nil
}

// Fence powers the target off, on, or off-then-on, and succeeds only when it has read
// the resulting state back from the BMC. Already being in the state is success.
func (a *Agent) Fence(ctx context.Context, req plugin.Request, action plugin.Action) (plugin.Result, error) {
	if err := a.Supports(action); err != nil {
		return agentkit.Unknown(), err
	}
	s, err := a.open(ctx, req)
	if err != nil {
		return s.result(), err
	}
	defer s.close(ctx)
	err = agentkit.Power(ctx, s, action)
	return s.result(), err
}

// Status reads the chassis power state. An answer the driver cannot parse is
// StateUnknown with the answer in the evidence, not an error.
func (a *Agent) Status(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	s, err := a.open(ctx, req)
	if err != nil {
		return s.result(), err
	}
	// open has read the state through the first provider that answered.
	defer s.close(ctx)
	return s.result(), nil
}

// Unfence powers the target on and verifies it is on.
func (a *Agent) Unfence(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	return a.Fence(ctx, req, plugin.ActionOn)
}
