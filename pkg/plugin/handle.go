package plugin

import (
	"context"
	"errors"
	"fmt"
)

// handle is what Host.Agent returns: an Agent that finds, or relaunches, the
// agent's process for every call.
type handle struct {
	host *Host
	name string
}

var _ Agent = (*handle)(nil)

func (a *handle) Describe(ctx context.Context) (Description, error) {
	var d Description
	err := a.call(ctx, "describe", func(ag Agent) (err error) {
		d, err = ag.Describe(ctx)
		return err
	})
	return d, err
}

func (a *handle) Validate(ctx context.Context, params map[string]string) error {
	return a.call(ctx, "validate", func(ag Agent) error {
		return ag.Validate(ctx, params)
	})
}

func (a *handle) Fence(ctx context.Context, req Request, action Action) (Result, error) {
	var res Result
	err := a.call(ctx, "fence "+string(action), func(ag Agent) (err error) {
		res, err = ag.Fence(ctx, req, action)
		return err
	})
	return res, err
}

func (a *handle) Status(ctx context.Context, req Request) (Result, error) {
	var res Result
	err := a.call(ctx, "status", func(ag Agent) (err error) {
		res, err = ag.Status(ctx, req)
		return err
	})
	return res, err
}

func (a *handle) Unfence(ctx context.Context, req Request) (Result, error) {
	var res Result
	err := a.call(ctx, "unfence", func(ag Agent) (err error) {
		res, err = ag.Unfence(ctx, req)
		return err
	})
	return res, err
}

// call runs fn on a live process of the agent. A process that died before the
// call is replaced first; one that dies during the call is discarded, so the
// next call relaunches, and the error wraps ErrAgentDied: the caller cannot know
// whether the target was touched and re-issues the idempotent call.
func (a *handle) call(ctx context.Context, op string, fn func(Agent) error) error {
	// Launching takes tens of milliseconds and cannot be cancelled; do not
	// start for a caller that has already given up.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("agent %s: %s: %w", a.name, op, err)
	}
	p, err := a.host.acquire(a.name)
	if err != nil {
		return err
	}
	err = fn(p.agent)
	if err == nil {
		return nil
	}
	// A process that exited makes the in-flight call fail with whatever the
	// transport saw at that moment; unless the caller's own context ended,
	// that failure is the death, not the agent's verdict.
	died := errors.Is(err, ErrAgentDied)
	if !died && ctx.Err() == nil && p.exited() {
		died = true
		err = fmt.Errorf("%w: %w", ErrAgentDied, err)
	}
	if died {
		a.host.discard(a.name, p)
	}
	return fmt.Errorf("agent %s: %s: %w", a.name, op, err)
}
