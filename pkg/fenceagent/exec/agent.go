package exec

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// Name is the agent name Describe reports.
const Name = "exec"

// Agent runs a ClusterLabs fence_* script for each call. It keeps no state
// between calls.
type Agent struct {
	// Base gives the agent its Describe, which lists the agent's own parameters; any
	// other param is passed to the script as a stdin line.
	agentkit.Base
}

// Option configures an Agent.
type Option func(*Agent)

// WithVersion sets the version Describe reports.
func WithVersion(v string) Option { return func(a *Agent) { a.SetVersion(v) } }

// New returns an exec agent.
func New(opts ...Option) *Agent {
	a := &Agent{Base: agentkit.NewBase(Name, agentkit.PowerActions, paramSpecs)}
	return agentkit.Apply(a, opts)
}

var _ plugin.Agent = (*Agent)(nil)

// Validate checks the params, including that the script exists and is
// executable, without running it.
func (a *Agent) Validate(ctx context.Context, params map[string]string) error {
	p, err := parseParams(params)
	if err != nil {
		return err
	}
	// A param the script does not read would be ignored (or worse, refused) only at the
	// first fence: the script's own metadata says which it reads.
	return checkKeys(ctx, p)
}

// Fence runs action=off (or on, or off then on for reboot) and succeeds only
// once the script's status reads the requested state back.
func (a *Agent) Fence(ctx context.Context, req plugin.Request, action plugin.Action) (plugin.Result, error) {
	if err := a.Supports(action); err != nil {
		return agentkit.Unknown(), err
	}
	c, err := open(req)
	if err != nil {
		return agentkit.Unknown(), err
	}
	err = agentkit.Power(ctx, c, action)
	return c.Result(c.state), err
}

// Status runs action=status: exit 0 is on, 2 is off, anything else an error.
func (a *Agent) Status(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	c, err := open(req)
	if err != nil {
		return agentkit.Unknown(), err
	}
	_, err = c.status(ctx)
	return c.Result(c.state), err
}

// Unfence runs action=on and verifies it.
func (a *Agent) Unfence(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	return a.Fence(ctx, req, plugin.ActionOn)
}

// call is one agent call against one target and the evidence it gathers.
type call struct {
	agentkit.Evidence
	p      params
	target string
	state  plugin.PowerState
	// lastRead is the last state a status run completed with, for errors.
	lastRead plugin.PowerState
}

func open(req plugin.Request) (*call, error) {
	p, err := parseRequest(req)
	if err != nil {
		return nil, err
	}
	c := &call{
		Evidence: agentkit.NewEvidence(agentkit.Values(p.secrets)...),
		p:        p,
		target:   req.Target,
		state:    plugin.StateUnknown,
		lastRead: plugin.StateUnknown,
	}
	c.Note("%s for node %q target %q", filepath.Base(p.script), req.Node, req.Target)
	return c, nil
}

// what names the script and target in errors.
func (c *call) what(action string) string {
	return fmt.Sprintf("%s %s action=%s", filepath.Base(c.p.script), c.target, action)
}

// status runs action=status once and records what it read.
func (c *call) status(ctx context.Context) (plugin.PowerState, error) {
	o, err := run(ctx, c.p, "status", c.target)
	if err != nil {
		c.state = plugin.StateUnknown
		return c.state, err
	}
	switch o.code {
	case exitOn:
		c.state = plugin.StateOn
	case exitOff:
		c.state = plugin.StateOff
	default:
		c.state = plugin.StateUnknown
		return c.state, c.failed("status", o)
	}
	c.lastRead = c.state
	c.Note("status exit %d (%s)", o.code, c.state)
	return c.state, nil
}

// Ensure brings the target to want and reads it back. A target already in
// want gets no power command. A status the script cannot give does not stop
// the power command, but the verification after it must succeed.
func (c *call) Ensure(ctx context.Context, want plugin.PowerState) error {
	got, err := c.status(ctx)
	if isContextErr(err) {
		return err
	}
	if err == nil && got == want {
		c.Note("already %s, nothing sent", want)
		return nil
	}
	o, err := run(ctx, c.p, string(want), c.target)
	if err != nil {
		return err
	}
	if o.code != 0 {
		return c.failed(string(want), o)
	}
	c.Note("action=%s exit 0", want)
	return c.verify(ctx, want)
}

// verify polls status until it reads want, the verify timeout passes, or ctx
// ends. Only a read of want is success.
func (c *call) verify(ctx context.Context, want plugin.PowerState) error {
	polled, err := agentkit.PollUntil(ctx, c.p.verifyTimeout, c.p.pollInterval, func(ctx context.Context, _ *agentkit.Attempt) (bool, error) {
		got, err := c.status(ctx)
		return got == want, agentkit.Again(err)
	})
	switch {
	case err == nil:
		c.Note("verified %s after %d status read(s)", want, polled.Reads)
		return nil
	case polled.Ended != nil:
		return fmt.Errorf("verify %s: %w", c.what(string(want)), polled.Ended)
	}
	msg := fmt.Sprintf("%s: not read back as %s within %s %s (last state %s)",
		c.what(string(want)), want, ParamVerifyTimeout, c.p.verifyTimeout, c.lastRead)
	if polled.Last != nil {
		msg += ": " + polled.Last.Error()
	}
	// Read back in another state: the device took the action and did not do it. No
	// state read at all says nothing of the kind.
	kind := plugin.KindRetryable
	if c.lastRead == plugin.StateOn || c.lastRead == plugin.StateOff {
		kind = plugin.KindNotVerified
	}
	return plugin.Errorf(kind, "%s", msg)
}

// failed is the error of a script run that exited with a failure: its kind and cause
// from the output's text, which it quotes, cleaned.
func (c *call) failed(action string, o outcome) error {
	kind, cause := classify(o.output)
	msg := c.what(action) + ": exit " + strconv.Itoa(o.code)
	if cause != "" {
		msg += ": " + cause
	}
	if out := clean(o.output); out != "" {
		msg += ": " + out
	}
	return plugin.Errorf(kind, "%s", msg)
}

func isContextErr(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}
