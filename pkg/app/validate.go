package app

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// ValidateConfig is --validate-config: the file decoded and validated, then, with
// checkAgents, every agent asked what it needs and about its parameters, without a
// cluster. It returns the
// warnings to print (the unversioned form, remote agents that did not answer) and the
// error that makes the file unusable.
func ValidateConfig(ctx context.Context, path string, checkAgents bool) ([]string, error) {
	cfg, warnings, err := loadConfig(path)
	if err != nil || !checkAgents {
		return warnings, err
	}
	// The agents' own launch logs would bury the verdict on stderr.
	host, err := plugin.NewHost(plugin.HostConfig{Dir: cfg.PluginDir, Agents: agentSpecs(cfg), Logger: hclog.NewNullLogger()})
	if err != nil {
		return warnings, fmt.Errorf("config: agents: %w", err)
	}
	defer host.Close()
	problems := checkConfiguredAgents(ctx, cfg, newAgentSource(cfg, host, nil))
	for _, u := range problems.Unreachable {
		warnings = append(warnings, fmt.Sprintf("%v (agent not checked)", u))
	}
	if len(problems.Invalid) > 0 {
		return warnings, fmt.Errorf("config: %w", problems.Invalid.ToAggregate())
	}
	return warnings, nil
}
