package controller

import (
	"context"
	"time"

	"github.com/kubefence/kubefence/pkg/leader"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// HealthChecker checks that an agent answers; *plugin.Host is one.
type HealthChecker interface {
	Healthy(ctx context.Context, name string) error
}

// WatchRemoteAgents health-checks every remote agent each interval and, while it answers,
// renews a Lease for it, so that `kubectl get leases` shows which datacenter agents are
// alive. A level with an agent that does not answer is skipped, with the reason recorded.
func (c *Controller) WatchRemoteAgents(ctx context.Context, hc HealthChecker, leases *leader.IdentityLeases, interval time.Duration) {
	var remote []string
	for _, a := range c.cfg.Agents {
		if a.Address != "" {
			remote = append(remote, a.Name)
		}
	}
	if len(remote) == 0 {
		return
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		for _, name := range remote {
			err := hc.Healthy(ctx, name)
			c.setAgentHealth(name, err)
			if err != nil {
				klog.FromContext(ctx).Error(err, "Remote agent does not answer", "agent", name)
				continue
			}
			if err := leases.Renew(ctx, name); err != nil {
				klog.FromContext(ctx).Error(err, "Renewing remote agent lease", "agent", name)
			}
		}
	}, interval)
}

func (c *Controller) setAgentHealth(name string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		delete(c.agentDown, name)
		return
	}
	c.agentDown[name] = err.Error()
}

// agentDownReason says why an agent is considered down, or "" when it is not known to be.
func (c *Controller) agentDownReason(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agentDown[name]
}
