package controller

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/leader"
)

// The incident loop's use of the remote agents' health (fence.go): a level whose agent is
// known down is skipped, on the record. How the health is watched and each agent's Lease
// kept is tested in pkg/fencecall (health_test.go).

// remoteAgent is the agent of remoteConfig that runs in a datacenter, not as a plugin
// binary next to the controller.
const remoteAgent = "dc-redfish"

// remoteConfig fences through the remote agent first and through the local ipmi second;
// both name the node's "bmc" annotation as their target.
func remoteConfig() *v1alpha1.Config {
	cfg := fixtureConfig()
	cfg.Agents = append(cfg.Agents, v1alpha1.Agent{Name: remoteAgent, Address: "redfish.dc1.example:9443",
		Target: v1alpha1.TargetSource{Annotation: "bmc"}})
	cfg.Policies[0].Levels = []v1alpha1.Level{{Agents: []string{remoteAgent}}, {Agents: []string{"ipmi"}}}
	cfg.Default()
	return cfg
}

// healthRound runs one round of the remote agents' health watch in which the agents of
// down fail their check. remoteConfig has one remote agent: its check ends the round's
// context, which the watch looks at only between rounds (the fake API server not at all).
func (f *fixture) healthRound(leases *leader.IdentityLeases, down map[string]error) {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if f.c.peers.health == nil {
		f.c.peers.health = &fencecall.Health{}
	}
	f.c.peers.health.WatchRemoteAgents(ctx, f.c.cfg, healthFunc(func(_ context.Context, name string) error {
		cancel()
		return down[name]
	}), leases, time.Hour)
}

// healthFunc is a HealthChecker made of a function.
type healthFunc func(ctx context.Context, name string) error

func (h healthFunc) Healthy(ctx context.Context, name string) error { return h(ctx, name) }

// agentLeases are the Leases the leader keeps for remote agents, on the fixture's API
// server and clock.
func (f *fixture) agentLeases() *leader.IdentityLeases {
	return &leader.IdentityLeases{Client: f.kube, Namespace: f.c.cfg.LeaderElection.Namespace, Component: "agent",
		Duration: time.Minute, RenewInterval: 10 * time.Second, Now: func() time.Time { return f.clock.Now() }}
}

// TestRemoteAgentDownSkipsItsLevel: a dead node whose first level goes through a remote
// agent that failed its health check is fenced by the next level at once, instead of
// waiting out a call to an agent known not to answer. The skip is on the incident's
// timeline and in an AgentDown Event, so a person sees why the BMC was not used.
func TestRemoteAgentDownSkipsItsLevel(t *testing.T) {
	for name, tc := range map[string]struct {
		down     map[string]error
		attempts []string // agent and state of each attempt
		events   []string
	}{
		"agent answers": {nil, []string{remoteAgent + " " + string(v1alpha1.AttemptVerified)},
			[]string{v1alpha1.ReasonFenceStarted, v1alpha1.ReasonRemediated}},
		"agent down": {map[string]error{remoteAgent: errors.New("health check: deadline exceeded")},
			[]string{remoteAgent + " " + string(v1alpha1.AttemptFailed), "ipmi " + string(v1alpha1.AttemptVerified)},
			[]string{v1alpha1.ReasonFenceStarted, v1alpha1.ReasonAgentDown, v1alpha1.ReasonRemediated}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, remoteConfig(), threeNodes()...)
			f.healthRound(f.agentLeases(), tc.down)
			f.clock.Set(f0.Add(time.Minute))
			f.renewAllBut("node-1")
			f.requests()
			f.sync("node-1")
			// One machine behind both agents: one fence, read back once.
			f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
			nf := f.incident("node-1")
			var attempts []string
			for _, a := range nf.Status.Attempts {
				attempts = append(attempts, a.Agent+" "+string(a.State))
			}
			if nf.Status.Phase != v1alpha1.PhaseRemediated || !slices.Equal(attempts, tc.attempts) {
				t.Errorf("phase %s, attempts %v; want Remediated, %v (%s)", nf.Status.Phase, attempts, tc.attempts, nf.Status.Message)
			}
			if skipped := len(stepsOf(nf, v1alpha1.StepLevelSkipped)) > 0; skipped != (tc.down != nil) {
				t.Errorf("%s step on the timeline: %v, want %v", v1alpha1.StepLevelSkipped, skipped, tc.down != nil)
			}
			f.expectEvents(tc.events...)
		})
	}
}
