package fencecall

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/kubefence/kubefence/pkg/plugin/plugintest"

	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// TestAgentDeadlineOnControllerClock: an attempt's deadline is on the controller's clock,
// which a test may fake. The agent's context gets the time left on that clock, bounded by
// the agent's timeout, whatever the wall clock says: a fake clock behind the wall clock
// does not expire the call before it is sent, and one ahead does not let it run longer.
func TestAgentDeadlineOnControllerClock(t *testing.T) {
	for name, offset := range map[string]time.Duration{
		"fake clock a year behind": -365 * 24 * time.Hour,
		"fake clock a year ahead":  365 * 24 * time.Hour,
		"real clock":               0,
	} {
		t.Run(name, func(t *testing.T) {
			var left time.Duration
			agent := &plugintest.Funcs{StatusFunc: func(ctx context.Context, _ plugin.Request) (plugin.Result, error) {
				d, ok := ctx.Deadline()
				if !ok {
					return plugin.Result{}, errors.New("no deadline")
				}
				left = time.Until(d)
				return plugin.Result{State: plugin.StateOff, Evidence: "Chassis Power is off"}, ctx.Err()
			}}
			cfg := &v1alpha1.Config{Agents: []v1alpha1.Agent{{Name: "ipmi", Target: v1alpha1.TargetSource{Annotation: "bmc"}}}}
			cfg.Default()
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: map[string]string{"bmc": "10.0.0.1"}}}
			fake := time.Now().Add(offset)
			c, err := New(plugintest.One{A: agent}, cfg, k8sfake.NewClientset(), NewMetrics(nil, nil), func() time.Time { return fake }, nil)
			if err != nil {
				t.Fatal(err)
			}
			step := fencer.Step{Kind: fencer.DoVerify, Level: 1, Agent: "ipmi", Try: 1}
			ev := c.Call(context.Background(), step, node, "", "node-1-x", 1, fake.Add(20*time.Second))
			if ev.Err != nil || ev.State != fencer.StateFenced {
				t.Fatalf("read back %q, %v (kind %s); want off", ev.State, ev.Err, ev.ErrKind)
			}
			if left <= 15*time.Second || left > 20*time.Second {
				t.Errorf("the agent's context has %s left, want the attempt's 20s", left)
			}
			// The agent's own timeout (30s by default) bounds a later attempt deadline.
			c.Call(context.Background(), step, node, "", "node-1-x", 1, fake.Add(time.Hour))
			if timeout := cfg.Agents[0].Timeout.Duration; left <= timeout-5*time.Second || left > timeout {
				t.Errorf("the agent's context has %s left, want its timeout %s", left, timeout)
			}
		})
	}
}
