package agentkit

import "github.com/kubefence/kubefence/pkg/plugin"

// Describe builds an agent's Description. Params is a copy of specs, so that a caller
// changing the result cannot change the specs the agent validates against.
func Describe(name, version string, actions []plugin.Action, specs []plugin.Param) plugin.Description {
	ps := make([]plugin.Param, len(specs))
	copy(ps, specs)
	return plugin.Description{
		Name:    name,
		Version: version,
		Actions: actions,
		Params:  ps,
	}
}
