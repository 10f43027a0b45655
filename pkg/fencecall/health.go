package fencecall

import (
	"context"
	"sync"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/leader"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// HealthChecker checks that an agent answers; *plugin.Host is one.
type HealthChecker interface {
	Healthy(ctx context.Context, name string) error
}

// Health knows which remote agents failed their last health check, and why.
type Health struct {
	mu   sync.Mutex
	down map[string]string
}

// WatchRemoteAgents health-checks every remote agent of cfg each interval and, while it
// answers, renews a Lease for it, so that `kubectl get leases` shows which datacenter
// agents are alive. A level with an agent that does not answer is skipped, with the
// reason recorded (Down).
func (h *Health) WatchRemoteAgents(ctx context.Context, cfg *v1alpha1.Config, hc HealthChecker, leases *leader.IdentityLeases, interval time.Duration) {
	var remote []string
	for _, a := range cfg.Agents {
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
			h.set(name, err)
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

func (h *Health) set(name string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.down, name)
		return
	}
	if h.down == nil {
		h.down = map[string]string{}
	}
	h.down[name] = err.Error()
}

// Down says why an agent is considered down, or "" when it is not known to be.
func (h *Health) Down(name string) string {
	if h == nil {
		return ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down[name]
}
