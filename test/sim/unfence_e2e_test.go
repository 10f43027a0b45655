package sim

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// Labels and annotations the sweep gives each node: its deadline's index, and its BMC's
// host alone (fence_ipmilan takes the port as a key of its own).
const (
	sweepLabel   = "kubefence.test/sweep"
	bmcHostKey   = "kubefence.test/bmc-host"
	unfenceAgent = "exec"
)

// TestTimedOutOnThroughIncident: the Reboot action's power-on goes through the
// real fence_ipmilan behind the exec agent, with onTimeout swept from 100 ms to 2.5 s, one
// node per deadline, all in one cluster. Each incident records what the BMC said after the
// call: a power on that timed out is read back, and the timeline says "read back on/off",
// never the error alone. What an incident claims matches the BMC's own power log at that
// moment, and no process of a call that read back off is alive once it is recorded.
func TestTimedOutOnThroughIncident(t *testing.T) {
	t.Parallel()
	needClusterLabs(t, fenceIPMILan)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	deadlines := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond,
		1500 * time.Millisecond, 2500 * time.Millisecond}
	ports := map[string]int{}
	var cfgErr error
	h := fastHarnessWith(t, ctx, HarnessOptions{Nodes: len(deadlines) + 1,
		Cluster: func(o *Options) {
			for i := range o.Nodes[:len(deadlines)] {
				n := &o.Nodes[i]
				host, port, _ := net.SplitHostPort(n.Annotations[IPMIAddressKey])
				ports[n.Name], _ = strconv.Atoi(port)
				n.Annotations[bmcHostKey] = host
				if n.Labels == nil {
					n.Labels = map[string]string{}
				}
				n.Labels[sweepLabel] = strconv.Itoa(i)
			}
		},
		Config: func(c *v1alpha1.Config) {
			var sum string
			if sum, cfgErr = installExecAgent(ctx, c.PluginDir, unfenceAgent); cfgErr != nil {
				return
			}
			c.Agents, c.Policies = sweepAgents(sum, deadlines, ports, c.Agents[0].SecretRef)
		}})
	if cfgErr != nil {
		t.Fatalf("install the exec agent: %v", cfgErr)
	}
	startLeader(t, ctx, h, "controller")
	for i := range deadlines {
		h.Cluster.Node(fmt.Sprintf("node-%d", i+1)).Crash()
	}
	timedOut := 0
	for i, d := range deadlines {
		node := fmt.Sprintf("node-%d", i+1)
		step, err := waitPowerOnOutcome(ctx, h, node)
		if err != nil {
			t.Fatalf("deadline %s: %v", d, err)
		}
		claim := claimedState(step)
		if claim == "" {
			t.Errorf("deadline %s: power on recorded without a state read back: %s", d, step.Message)
		}
		if step.Type == v1alpha1.StepUnfenceFailed {
			timedOut++
			if claim == "off" {
				// The machine stays off, so no later call for it runs: anything left is the
				// timed-out call's.
				if left := callProcesses(ports[node]); len(left) > 0 {
					t.Errorf("deadline %s: processes of the call alive after it was recorded: %v", d, left)
				}
			}
		}
		actual, err := bmcStateAt(h.BMCs[node], step.Time.Time)
		if err != nil {
			t.Fatal(err)
		}
		if claim != "" && claim != actual {
			t.Errorf("deadline %s: the incident claims %s at %s (%q), the BMC's log says %s",
				d, claim, step.Time.Format(time.StampMicro), step.Message, actual)
		}
		t.Logf("deadline %s: %s %q; BMC %s", d, step.Type, step.Message, actual)
	}
	if timedOut == 0 {
		t.Errorf("no power on timed out, not even at %s: the sweep tested nothing", deadlines[0])
	}
}

// sweepAgents gives each deadline an exec agent on its node's BMC and a Reboot policy for
// that node alone; every node may be fenced at once.
func sweepAgents(sum string, deadlines []time.Duration, ports map[string]int, secret *v1alpha1.SecretRef) ([]v1alpha1.Agent, []v1alpha1.Policy) {
	var agents []v1alpha1.Agent
	var policies []v1alpha1.Policy
	all := intstr.FromString("100%")
	for i, d := range deadlines {
		name := fmt.Sprintf("on-%d", i)
		agents = append(agents, v1alpha1.Agent{Name: name, Binary: unfenceAgent, SHA256: sum, SecretRef: secret,
			Params: map[string]string{"script": fenceIPMILan, "target_key": "ip",
				"ipport": strconv.Itoa(ports[fmt.Sprintf("node-%d", i+1)]), "lanplus": "1", "cipher": "3",
				"power_timeout": "3", "verify_timeout": "10s", "poll_interval": "200ms"},
			Target:    v1alpha1.TargetSource{Annotation: bmcHostKey},
			Timeout:   metav1.Duration{Duration: 30 * time.Second},
			OnTimeout: metav1.Duration{Duration: d}})
		policies = append(policies, v1alpha1.Policy{Name: name, Action: v1alpha1.ActionReboot,
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{sweepLabel: strconv.Itoa(i)}},
			Levels:       []v1alpha1.Level{{Agents: []string{name}}},
			Budget:       v1alpha1.Budget{MaxConcurrent: int32(len(deadlines)), MaxUnhealthy: &all}})
	}
	return agents, policies
}

// waitPowerOnOutcome waits for node's incident to record how its power on went.
func waitPowerOnOutcome(ctx context.Context, h *Harness, node string) (v1alpha1.Step, error) {
	var out v1alpha1.Step
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, h.Cluster, node)
		if err != nil || len(incs) == 0 {
			return false, nil
		}
		for _, s := range incs[0].Status.Timeline {
			if s.Type == v1alpha1.StepPoweredOn || s.Type == v1alpha1.StepUnfenceFailed {
				out = s
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return out, fmt.Errorf("no power on outcome recorded for %s: %w", node, err)
	}
	return out, nil
}

// claimedState is the power state a step says was read: "reports on" (PoweredOn) or
// "read back off" (UnfenceFailed); empty when it claims none.
func claimedState(s v1alpha1.Step) string {
	for _, st := range []string{"on", "off"} {
		if strings.Contains(s.Message, " reports "+st+":") || strings.Contains(s.Message, " read back "+st+" ") {
			return st
		}
	}
	return ""
}

// bmcStateAt is the power state the BMC's log shows at t: the last on or off before it.
func bmcStateAt(b *bmc.IPMISim, t time.Time) (string, error) {
	events, err := b.Events()
	if err != nil {
		return "", err
	}
	state := "on" // the harness powers every machine on at start
	for _, e := range events {
		if e.Time.After(t) {
			break
		}
		switch e.Action {
		case bmc.ActionOn:
			state = "on"
		case bmc.ActionOff:
			state = "off"
		}
	}
	return state, nil
}
