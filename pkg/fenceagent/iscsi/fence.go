package iscsi

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// protected reads the targets the call protects. Naming a target the server does not
// have is permanent; so is protecting nothing, which would prove nothing.
func (c *call) protected(ctx context.Context) ([]Target, error) {
	_, ts, err := c.read(ctx)
	return ts, err
}

// read reads every target of the server and picks the protected ones.
func (c *call) read(ctx context.Context) (all, protected []Target, err error) {
	all, err = c.b.Targets(ctx)
	if err != nil {
		return nil, nil, classify(err, "read targets of "+c.server)
	}
	protected, err = c.pick(all)
	return all, protected, err
}

func (c *call) pick(all []Target) ([]Target, error) {
	if len(c.p.targets) == 0 {
		if len(all) == 0 {
			return nil, plugin.Errorf(plugin.KindPermanent, "%s has no targets: nothing to protect", c.server)
		}
		return all, nil
	}
	var out []Target
	for _, name := range c.p.targets {
		n := len(out)
		for _, t := range all {
			if strings.EqualFold(t.Name, name) {
				out = append(out, t)
			}
		}
		if len(out) == n {
			return nil, plugin.Errorf(plugin.KindPermanent, "%s: target %s not found on %s", ParamTargets, name, c.server)
		}
	}
	return out, nil
}

// observe sets the call's state from one read: off when every target cuts the
// initiator off, on otherwise. With detail it notes what each target grants.
func (c *call) observe(ts []Target, detail bool) bool {
	cut := true
	for _, t := range ts {
		a := c.p.initiator.accessTo(t)
		cut = cut && a.cut()
		if detail {
			c.Note("target %s: %d own rule(s), %d shared rule(s), %d connection(s) of the initiator",
				t.label(), len(a.owned), len(a.shared), len(a.conns))
		}
	}
	c.state = plugin.StateOn
	if cut {
		c.state = plugin.StateOff
	}
	return cut
}

// refuse fails when a target admits the initiator by a rule it shares with others:
// such a target cannot fence, and touching its rule would cut off other initiators.
func (c *call) refuse(ts []Target) error {
	var why []string
	for _, t := range ts {
		for _, s := range c.p.initiator.accessTo(t).shared {
			why = append(why, fmt.Sprintf("target %s cannot fence: %s", t.label(), s))
		}
	}
	if len(why) == 0 {
		return nil
	}
	c.Note("refused: %s", strings.Join(why, "; "))
	return plugin.Errorf(plugin.KindPermanent, "fence %s: nothing changed: %s", c.p.initiator, strings.Join(why, "; "))
}

// fence reads, cuts and reads again until a read shows the initiator cut off from every
// protected target. It checks every target before touching any.
func (c *call) fence(ctx context.Context) error {
	return c.poll(ctx, "cut off", func(ctx context.Context, a *agentkit.Attempt) (bool, error) {
		first := a.N == 1
		ts, err := c.protected(ctx)
		if err != nil {
			return false, err
		}
		if err := c.refuse(ts); err != nil {
			return false, err
		}
		if c.observe(ts, first) {
			if first {
				c.Note("already cut off, nothing changed")
			}
			return true, nil
		}
		return false, c.cut(ctx, ts)
	})
}

// cut removes the initiator's own rules, then closes its connections: unbinding a rule
// does not end a session that logged in under it.
func (c *call) cut(ctx context.Context, ts []Target) error {
	for _, t := range ts {
		for _, r := range c.p.initiator.accessTo(t).owned {
			err := c.b.Unbind(ctx, t, r)
			if errors.Is(err, ErrNotFound) {
				c.Note("target %s: rule %s=%s already gone", t.label(), r.Kind, r.Value)
				continue
			}
			if err != nil {
				return classify(err, fmt.Sprintf("unbind %s=%s from target %s", r.Kind, r.Value, t.label()))
			}
			c.removed = append(c.removed, removal{Target: t.Name, TPG: t.TPG, Rule: r})
			c.Note("target %s: unbound %s=%s", t.label(), r.Kind, r.Value)
		}
	}
	for _, t := range ts {
		for _, conn := range c.p.initiator.accessTo(t).conns {
			err := c.b.CloseConnection(ctx, t, conn)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return classify(err, fmt.Sprintf("close session %s of target %s", conn.Session, t.label()))
			}
			if err == nil {
				c.Note("target %s: closed session %s connection %s of %s from %s", t.label(), conn.Session, conn.ID, conn.Initiator, conn.Address)
			}
		}
	}
	return nil
}

// poll runs step until it reports done, an error of a kind other than retryable or
// unreachable, or the verify timeout ends. Running out of time is a failure that says
// what the last read saw, never a success.
func (c *call) poll(ctx context.Context, goal string, step func(ctx context.Context, a *agentkit.Attempt) (bool, error)) error {
	polled, err := agentkit.PollUntil(ctx, c.p.verifyTimeout, c.p.pollInterval, func(ctx context.Context, a *agentkit.Attempt) (bool, error) {
		done, err := step(ctx, a)
		// A failed first read changed nothing: report it now rather than poll a
		// server that is down for the whole verify timeout.
		if k := plugin.KindOf(err); err == nil || a.N == 1 || (k != plugin.KindRetryable && k != plugin.KindTargetUnreachable) {
			return done, err
		}
		return false, agentkit.Again(err)
	})
	switch {
	case err == nil:
		c.Note("verified %s by reading back acls and sessions: read %d time(s) in %s", goal, polled.Reads, polled.Waited)
		return nil
	case errors.Is(err, agentkit.ErrExpired):
		return c.notVerified(goal, polled)
	}
	return err
}

// notVerified is the failure of a poll that ran out of time: of the kind of the last
// read when that failed, retryable when it showed the wrong state.
func (c *call) notVerified(goal string, polled agentkit.Polled) error {
	within := polled.Waited.String()
	if polled.Ended != nil {
		// The call's deadline, not verifyTimeout, ended it.
		within += " (" + polled.Ended.Error() + ")"
	}
	switch {
	case polled.Reads == 0:
		c.Note("%s not verified: the call's deadline ended before the first read", goal)
		return plugin.Errorf(plugin.KindTargetUnreachable, "%s %s not verified within %s: %s not read", goal, c.p.initiator, within, c.server)
	case polled.Last != nil:
		msg := agentkit.Message(polled.Last)
		c.Note("%s not verified after %d read(s) in %s: %s", goal, polled.Reads, polled.Waited, msg)
		return plugin.Errorf(plugin.KindOf(polled.Last), "%s %s not verified within %s: %s", goal, c.p.initiator, within, msg)
	}
	c.Note("%s not verified after %d read(s) in %s: last read %s", goal, polled.Reads, polled.Waited, c.state)
	return plugin.Errorf(plugin.KindRetryable, "%s %s not verified within %s: the last read still shows %s", goal, c.p.initiator, within, c.state)
}
