package fencecall

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/leader"
)

const remoteAgent = "dc-redfish"

// healthFunc is a HealthChecker made of a function.
type healthFunc func(ctx context.Context, name string) error

func (h healthFunc) Healthy(ctx context.Context, name string) error { return h(ctx, name) }

// healthRound runs WatchRemoteAgents for one round in which the agents of down fail their
// health check, and returns the agents it asked about. The check of the last remote
// agent ends the context, and the loop looks at it only between rounds.
func healthRound(h *Health, cfg *v1alpha1.Config, leases *leader.IdentityLeases, down map[string]error) []string {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var remote, asked []string
	for _, a := range cfg.Agents {
		if a.Address != "" {
			remote = append(remote, a.Name)
		}
	}
	hc := healthFunc(func(_ context.Context, name string) error {
		asked = append(asked, name)
		if len(asked) == len(remote) {
			cancel()
		}
		return down[name]
	})
	h.WatchRemoteAgents(ctx, cfg, hc, leases, time.Hour)
	return asked
}

// TestRemoteAgentLease: while a remote agent answers its health check the leader renews
// a Lease for it, which is how `kubectl get leases` shows that the datacenter agents are
// alive; an agent that stops answering gets no renewal (its Lease ages) and is marked
// down with the reason; one that answers again is renewed and no longer down. Local
// agents are not health-checked this way.
func TestRemoteAgentLease(t *testing.T) {
	now := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	kube := fake.NewClientset()
	cfg := &v1alpha1.Config{Agents: []v1alpha1.Agent{{Name: "ipmi"}, {Name: remoteAgent, Address: "redfish.dc1.example:9443"}}}
	cfg.Default()
	leases := &leader.IdentityLeases{Client: kube, Namespace: cfg.LeaderElection.Namespace, Component: "agent",
		Duration: time.Minute, RenewInterval: 10 * time.Second, Now: func() time.Time { return now }}
	h := &Health{}
	name := leader.LeaseName("agent", remoteAgent)
	renewTime := func() time.Time {
		l, err := kube.CoordinationV1().Leases(leases.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != remoteAgent || l.Labels[leader.ComponentLabel] != "agent" {
			t.Errorf("lease %s held by %v, labels %v; want the agent's", name, l.Spec.HolderIdentity, l.Labels)
		}
		return l.Spec.RenewTime.Time
	}

	if asked := healthRound(h, cfg, leases, nil); !slices.Equal(asked, []string{remoteAgent}) {
		t.Errorf("health checks of %v, want only the remote agent", asked)
	}
	if got := renewTime(); !got.Equal(time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)) {
		t.Errorf("lease renewed at %s, want the first round's", got)
	}

	now = now.Add(time.Minute)
	healthRound(h, cfg, leases, map[string]error{remoteAgent: errors.New("dial tcp 10.1.0.7:9443: connection refused")})
	if why := h.Down(remoteAgent); why != "dial tcp 10.1.0.7:9443: connection refused" {
		t.Errorf("down reason %q, want the health check's error", why)
	}
	if got := renewTime(); !got.Equal(time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)) {
		t.Errorf("lease of a silent agent renewed at %s", got)
	}

	now = now.Add(time.Minute)
	healthRound(h, cfg, leases, nil)
	if why := h.Down(remoteAgent); why != "" {
		t.Errorf("down reason %q after the agent answered again", why)
	}
	if got := renewTime(); !got.Equal(now) {
		t.Errorf("lease renewed at %s, want %s", got, now)
	}
}
