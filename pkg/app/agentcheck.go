package app

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// agentCheckTimeout bounds each agent's check at load, launch or dial included.
const agentCheckTimeout = 15 * time.Second

// agentProblems are what the configured agents said of their configuration at load.
type agentProblems struct {
	// Invalid are what an agent refused for good, each at its place in the file: a
	// parameter (agents[0].params.cipherSuite), credentials it needs and has no
	// secretRef for, a binary whose checksum does not match. The configuration cannot
	// fence with them.
	Invalid field.ErrorList
	// Unreachable are agents that did not answer (a remote agent down, a local one slow
	// to start): reported, not fatal, so that a passing fault does not keep the
	// controller from starting, and checked again at their first call.
	Unreachable []error
}

// checkConfiguredAgents asks every configured agent, local or remote, what it needs
// (Describe) and what it makes of its parameters (Validate), so that a parameter it
// does not know, a value out of range, a secret passed as a parameter, or credentials it
// requires and no secretRef supplies are refused when the configuration is loaded, not
// at the first fence.
func checkConfiguredAgents(ctx context.Context, cfg *v1alpha1.Config, agents fencecall.Source) agentProblems {
	// All at once: a start that waited for each unreachable agent's timeout in turn
	// would hold back leader election by minutes when a datacenter is dark.
	invalid := make([]field.ErrorList, len(cfg.Agents))
	unreachable := make([]error, len(cfg.Agents))
	var wg sync.WaitGroup
	for i, a := range cfg.Agents {
		wg.Go(func() { invalid[i], unreachable[i] = checkAgent(ctx, field.NewPath("agents").Index(i), a, agents) })
	}
	wg.Wait()
	var out agentProblems
	for i := range cfg.Agents {
		out.Invalid = append(out.Invalid, invalid[i]...)
		if unreachable[i] != nil {
			out.Unreachable = append(out.Unreachable, unreachable[i])
		}
	}
	return out
}

// checkAgent checks one agent at path p: the problems it refuses for good, or the
// error of an agent that did not answer.
func checkAgent(ctx context.Context, p *field.Path, a v1alpha1.Agent, agents fencecall.Source) (field.ErrorList, error) {
	ctx, cancel := context.WithTimeout(ctx, agentCheckTimeout)
	defer cancel()
	agent, err := agents.Agent(a.Name)
	if err != nil {
		return agentError(p, a, err)
	}
	params := a.Params
	if params == nil {
		params = map[string]string{}
	}
	errs, unreachable := agentError(p, a, agent.Validate(ctx, params))
	if unreachable != nil {
		return nil, unreachable
	}
	d, err := agent.Describe(ctx)
	if err != nil {
		more, unreachable := agentError(p, a, err)
		return append(errs, more...), unreachable
	}
	return append(errs, requiredSecrets(p, a, d)...), nil
}

// agentError places what an agent refused: each parameter it names at its field, any
// other permanent refusal at the agent. Any other error is the agent not answering.
func agentError(p *field.Path, a v1alpha1.Agent, err error) (field.ErrorList, error) {
	switch {
	case err == nil:
		return nil, nil
	case plugin.KindOf(err) != plugin.KindPermanent:
		return nil, fmt.Errorf("%s (%s): %w", p, a.Name, err)
	}
	named := plugin.ParamErrors(err)
	if len(named) == 0 {
		msg := err.Error()
		if !strings.HasPrefix(msg, "agent "+a.Name+":") {
			msg = "agent " + a.Name + ": " + msg
		}
		return field.ErrorList{field.Invalid(p, field.OmitValueType{}, msg)}, nil
	}
	var errs field.ErrorList
	for _, pe := range named {
		// The value is the agent's to quote: it never quotes a secret.
		errs = append(errs, field.Invalid(p.Child("params", pe.Name), field.OmitValueType{}, fmt.Sprintf("%s (agent %s)", pe.Detail, a.Name)))
	}
	return errs, nil
}

// requiredSecrets refuses an agent without a secretRef whose Describe marks secret
// parameters as required (a BMC's user name and password): every fence through it
// would fail on missing credentials. Agents whose secrets are optional (a cloud agent
// that may use the pod's own identity) are not held to it.
func requiredSecrets(p *field.Path, a v1alpha1.Agent, d plugin.Description) field.ErrorList {
	if a.SecretRef != nil || a.NetworkFence != nil {
		return nil
	}
	var need []string
	for _, s := range d.Params {
		if s.Secret && s.Required {
			need = append(need, s.Name)
		}
	}
	if len(need) == 0 {
		return nil
	}
	return field.ErrorList{field.Required(p.Child("secretRef"), fmt.Sprintf(
		"agent %s (%s) needs the secret parameters %s: name the Secret that holds them", a.Name, d.Name, strings.Join(need, ", ")))}
}
