package iscsi

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// Name is the agent name Describe reports.
const Name = "iscsi"

// Agent fences nodes at their iSCSI storage. For this agent "off" means cut off: no
// ACL rule of a protected target admits the node's initiator and it has no live
// connection; "on" means some protected target admits it again. It keeps no state
// between calls.
type Agent struct {
	// Base gives the agent its Describe.
	agentkit.Base
	// Validator gives it Validate: the params, checked without contacting the storage
	// server.
	agentkit.Validator[params]
	tgtadm string
}

// Option configures an Agent.
type Option func(*Agent)

// WithVersion sets the version Describe reports.
func WithVersion(v string) Option { return func(a *Agent) { a.SetVersion(v) } }

// WithTgtadm sets the tgtadm executable (default: tgtadm on PATH).
func WithTgtadm(path string) Option { return func(a *Agent) { a.tgtadm = path } }

// New returns an iSCSI agent. Reboot means nothing for storage: its actions are off
// and on.
func New(opts ...Option) *Agent {
	a := &Agent{
		Base:      agentkit.NewBase(Name, []plugin.Action{plugin.ActionOff, plugin.ActionOn}, paramSpecs),
		Validator: parseParams,
	}
	return agentkit.Apply(a, opts)
}

var _ plugin.Agent = (*Agent)(nil)

// Fence cuts the initiator off (off) or restores its access (on, the same as Unfence)
// and succeeds only after reading the result back from the storage server.
func (a *Agent) Fence(ctx context.Context, req plugin.Request, action plugin.Action) (plugin.Result, error) {
	if err := a.Supports(action); err != nil {
		return agentkit.Unknown(), err
	}
	if action == plugin.ActionOn {
		return a.Unfence(ctx, req)
	}
	c, err := a.open(req)
	if err != nil {
		return agentkit.Unknown(), err
	}
	err = c.fence(ctx)
	return c.result(true), err
}

// Status reads ACLs and connections of the protected targets.
func (a *Agent) Status(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	c, err := a.open(req)
	if err != nil {
		return agentkit.Unknown(), err
	}
	ts, err := c.protected(ctx)
	if err != nil {
		return c.result(false), err
	}
	c.observe(ts, true)
	return c.result(false), nil
}

// Unfence restores exactly the rules named by the "removed:" lines of the restore
// parameter or, without it, binds the initiator to every protected target that does
// not admit it; then reads the rules back.
func (a *Agent) Unfence(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	if req.Restore != "" {
		// The controller hands back the fence's evidence in the request; the restore
		// parameter remains for a person driving the agent by hand.
		req.Params = maps.Clone(req.Params)
		if req.Params == nil {
			req.Params = map[string]string{}
		}
		req.Params[ParamRestore] = req.Restore
	}
	c, err := a.open(req)
	if err != nil {
		return agentkit.Unknown(), err
	}
	err = c.unfence(ctx)
	return c.result(false), err
}

// call is one request's view of one storage server and the evidence it gathers.
type call struct {
	// Evidence has no secrets to scrub: the agent is given none.
	agentkit.Evidence
	p       params
	b       Backend
	server  string
	state   plugin.PowerState
	removed []removal
}

func (a *Agent) open(req plugin.Request) (*call, error) {
	p, err := parseRequest(req)
	if err != nil {
		return nil, err
	}
	c := &call{p: p, state: plugin.StateUnknown}
	switch p.backend {
	case BackendLIO:
		c.b = &LIO{Root: p.configfsRoot}
		c.server = "lio configfs " + p.configfsRoot
	default:
		c.b = &Tgt{Bin: a.tgtadm, ControlPort: p.controlPort, LLD: p.lld, Timeout: p.timeout}
		c.server = fmt.Sprintf("tgtd control port %d", p.controlPort)
	}
	c.Note("%s, initiator %s of node %q, epoch %d", c.server, p.initiator, req.Node, req.Epoch)
	return c, nil
}

// result is what the call observed. A fence call always ends with the removed line,
// also when it failed part way, so that what it did can be undone.
func (c *call) result(fence bool) plugin.Result {
	lines := c.Steps()
	if fence {
		lines = append(lines, formatRemoved(c.removed))
	}
	return plugin.Result{State: c.state, Evidence: strings.Join(lines, "\n")}
}
