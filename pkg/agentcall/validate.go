package agentcall

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// agentCheckTimeout bounds each agent's Validate at load, launch or dial included.
const agentCheckTimeout = 15 * time.Second

// AgentProblems are what the configured agents said of their parameters at load.
type AgentProblems struct {
	// Invalid are what an agent refused for good (Permanent): its parameters, a binary
	// whose checksum does not match, a script that is not there. The configuration
	// cannot fence with them.
	Invalid []error
	// Unreachable are agents that did not answer (a remote agent down, a local one slow
	// to start): reported, not fatal, so that a passing fault does not keep the
	// controller from starting, and checked again at their first call.
	Unreachable []error
}

// Err joins the invalid ones.
func (p AgentProblems) Err() error { return errors.Join(p.Invalid...) }

// ValidateAgents asks every configured agent, local or remote, to check the parameters
// the configuration gives it (Validate), so that an unknown name, an out-of-range value
// or a secret passed as a parameter is refused when the configuration is loaded, not at
// the first fence. Each problem names the agent's field path and the agent.
func ValidateAgents(ctx context.Context, cfg *v1alpha1.Config, agents Source) AgentProblems {
	// All at once: a start that waited for each unreachable agent's timeout in turn
	// would hold back leader election by minutes when a datacenter is dark.
	errs := make([]error, len(cfg.Agents))
	var wg sync.WaitGroup
	for i, a := range cfg.Agents {
		wg.Go(func() { errs[i] = validateAgent(ctx, agents, a) })
	}
	wg.Wait()
	var out AgentProblems
	for i, a := range cfg.Agents {
		err := errs[i]
		if err == nil {
			continue
		}
		err = fmt.Errorf("agents[%d] (%s): %w", i, a.Name, err)
		if plugin.KindOf(err) != plugin.KindPermanent {
			out.Unreachable = append(out.Unreachable, err)
			continue
		}
		out.Invalid = append(out.Invalid, err)
	}
	return out
}

func validateAgent(ctx context.Context, agents Source, a v1alpha1.Agent) error {
	ctx, cancel := context.WithTimeout(ctx, agentCheckTimeout)
	defer cancel()
	agent, err := agents.Agent(a.Name)
	if err != nil {
		return err
	}
	params := a.Params
	if params == nil {
		params = map[string]string{}
	}
	return agent.Validate(ctx, params)
}
