package iscsi

import (
	"context"
	"fmt"
	"strings"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// unfence binds what it must and reads back until every wanted rule is there.
func (c *call) unfence(ctx context.Context) error {
	all, ts, err := c.read(ctx)
	if err != nil {
		return err
	}
	want, err := c.wanted(all, ts)
	if err != nil {
		return err
	}
	if len(want) == 0 {
		c.Note("nothing to restore")
	}
	for _, w := range want {
		t, ok := find(all, w)
		if !ok {
			return plugin.Errorf(plugin.KindPermanent, "%s: target %s no longer exists on %s", ParamRestore, w.Target, c.server)
		}
		if hasRule(t, w.Rule) {
			c.Note("target %s: %s=%s already bound", t.label(), w.Rule.Kind, w.Rule.Value)
			continue
		}
		if err := c.b.Bind(ctx, t, w.Rule); err != nil {
			return classify(err, fmt.Sprintf("bind %s=%s to target %s", w.Rule.Kind, w.Rule.Value, t.label()))
		}
		c.Note("target %s: bound %s", t.label(), w)
	}
	return c.poll(ctx, "access restored", func(ctx context.Context, _ *agentkit.Attempt) (bool, error) {
		all, ts, err := c.read(ctx)
		if err != nil {
			return false, err
		}
		c.observe(ts, false)
		for _, w := range want {
			if t, ok := find(all, w); !ok || !hasRule(t, w.Rule) {
				return false, nil
			}
		}
		return true, nil
	})
}

// wanted is what Unfence binds: the restore records, which must all name this initiator
// (the agent never touches other initiators' rules), or else one rule for the initiator
// on every protected target that does not admit it.
// A restored rule may lie on a target outside the protected set, so records are
// looked up among all targets.
func (c *call) wanted(all, ts []Target) ([]removal, error) {
	if c.p.hasRestore {
		recs, err := parseRemoved(c.p.restore)
		if err != nil {
			return nil, plugin.Errorf(plugin.KindPermanent, "%s: %v", ParamRestore, err)
		}
		for _, r := range recs {
			if !c.p.initiator.owns(r.Rule) {
				return nil, plugin.Errorf(plugin.KindPermanent, "%s: record %q names another initiator than %s; nothing changed", ParamRestore, r, c.p.initiator)
			}
			if _, ok := find(all, r); !ok {
				return nil, plugin.Errorf(plugin.KindPermanent, "%s: target %s no longer exists on %s; nothing changed", ParamRestore, r.Target, c.server)
			}
		}
		return recs, nil
	}
	rule := Rule{Kind: RuleIQN, Value: c.p.initiator.IQN}
	if rule.Value == "" {
		rule = Rule{Kind: RuleAddr, Value: c.p.initiator.Address.String()}
	}
	var out []removal
	for _, t := range ts {
		if !c.p.initiator.accessTo(t).admitted() {
			out = append(out, removal{Target: t.Name, TPG: t.TPG, Rule: rule})
		}
	}
	return out, nil
}

func find(ts []Target, r removal) (Target, bool) {
	for _, t := range ts {
		if strings.EqualFold(t.Name, r.Target) && t.TPG == r.TPG {
			return t, true
		}
	}
	return Target{}, false
}

func hasRule(t Target, r Rule) bool {
	for _, have := range t.Rules {
		if have.Kind == r.Kind && strings.EqualFold(have.Value, r.Value) {
			return true
		}
	}
	return false
}
