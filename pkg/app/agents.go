package app

import (
	"k8s.io/client-go/dynamic"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/netfence"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// agentSource hands out the configured agents: those the controller carries out
// itself (csi-addons NetworkFences) and the plugins of host.
type agentSource struct {
	own  map[string]plugin.Agent
	host *plugin.Host
}

func (s agentSource) Agent(name string) (plugin.Agent, error) {
	if a, ok := s.own[name]; ok {
		return a, nil
	}
	return s.host.Agent(name)
}

// newAgentSource is cfg's agents: its NetworkFence agents on client (nil when no
// cluster is at hand: they are then only checked as configured), the rest on host.
func newAgentSource(cfg *v1alpha1.Config, host *plugin.Host, client dynamic.Interface) agentSource {
	own := map[string]plugin.Agent{}
	for _, a := range cfg.Agents {
		nf := a.NetworkFence
		if nf == nil {
			continue
		}
		c := netfence.Config{Name: a.Name, Driver: nf.Driver, ClassName: nf.ClassName, Parameters: nf.Parameters}
		if nf.Secret != nil {
			c.SecretNamespace, c.SecretName = nf.Secret.Namespace, nf.Secret.Name
		}
		own[a.Name] = netfence.New(client, c)
	}
	return agentSource{own: own, host: host}
}

func agentSpecs(cfg *v1alpha1.Config) map[string]plugin.AgentSpec {
	specs := map[string]plugin.AgentSpec{}
	for _, a := range cfg.Agents {
		if a.NetworkFence != nil {
			continue // the controller's own, no plugin
		}
		spec := plugin.AgentSpec{Binary: a.Binary, SHA256: a.SHA256, Address: a.Address}
		if a.TLS != nil {
			spec.CertFile, spec.KeyFile, spec.CAFile, spec.ServerName = a.TLS.CertFile, a.TLS.KeyFile, a.TLS.CAFile, a.TLS.ServerName
		}
		specs[a.Name] = spec
	}
	return specs
}
