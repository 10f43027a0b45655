package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// ValidateOptions say how far --validate-config checks.
type ValidateOptions struct {
	// Agents asks every agent to check its parameters (--validate-agents).
	Agents bool
	// RequireFiles makes a remote agent's certificate file that is not on this machine an
	// error, as it is for the controller (--require-files: the chart's validate init
	// container runs with the controller's files mounted). Without it such an agent is a
	// warning and not checked: the file names paths in the controller's pod.
	RequireFiles bool
}

// ValidateConfig is --validate-config: the file decoded and validated, then, with
// o.Agents, every agent asked what it needs and about its parameters, without a cluster. It returns the
// warnings to print (the unversioned form, remote agents that did not answer or whose
// certificate files are not on this machine) and the error that makes the file unusable.
func ValidateConfig(ctx context.Context, path string, o ValidateOptions) ([]string, error) {
	cfg, warnings, err := loadConfig(path)
	if err != nil || !o.Agents {
		return warnings, err
	}
	// The agents' own launch logs would bury the verdict on stderr.
	host, err := plugin.NewHost(plugin.HostConfig{Dir: cfg.PluginDir, Agents: agentSpecs(cfg), Logger: hclog.NewNullLogger()})
	if err != nil {
		return warnings, fmt.Errorf("config: agents: %w", err)
	}
	defer host.Close()
	var agents fencecall.Source = newAgentSource(cfg, host, nil)
	if !o.RequireFiles {
		agents = elsewhere{Source: agents, absent: absentTLSFiles(cfg)}
	}
	problems := checkConfiguredAgents(ctx, cfg, agents)
	for _, u := range problems.Unreachable {
		warnings = append(warnings, fmt.Sprintf("%v (agent not checked)", u))
	}
	if len(problems.Invalid) > 0 {
		return warnings, fmt.Errorf("config: %w", problems.Invalid.ToAggregate())
	}
	return warnings, nil
}

// elsewhere is an AgentSource that does not dial the remote agents whose certificate
// files are not on this machine: a file checked on a workstation names paths in the
// controller's pod. Those agents count as not answering (a warning). Files that are here
// are read and the agent dialled, so a bad certificate is still an error.
type elsewhere struct {
	fencecall.Source
	absent map[string]error
}

func (e elsewhere) Agent(name string) (plugin.Agent, error) {
	if err := e.absent[name]; err != nil {
		return nil, err
	}
	return e.Source.Agent(name)
}

// absentTLSFiles names, per remote agent, the certificate files of its tls block that do
// not exist here. Any other error reading them is left to the dial, which reports it.
func absentTLSFiles(cfg *v1alpha1.Config) map[string]error {
	out := map[string]error{}
	for _, a := range cfg.Agents {
		if a.Address == "" || a.TLS == nil {
			continue
		}
		var missing []string
		for _, f := range []struct{ field, path string }{
			{"certFile", a.TLS.CertFile}, {"keyFile", a.TLS.KeyFile}, {"caFile", a.TLS.CAFile},
		} {
			if _, err := os.Stat(f.path); errors.Is(err, fs.ErrNotExist) {
				missing = append(missing, fmt.Sprintf("tls.%s %s", f.field, f.path))
			}
		}
		if len(missing) > 0 {
			out[a.Name] = fmt.Errorf("%s not on this machine: read where the controller runs", strings.Join(missing, ", "))
		}
	}
	return out
}
