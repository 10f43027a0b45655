package fencecall

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/policy"
)

// TargetCheck is one fence device read, as Pacemaker's monitor reads each stonith
// device: a broken BMC password shows up weeks before the node it guards dies.
type TargetCheck struct {
	Node, Agent, Target string
	// State is what the agent read (on, off, unknown); empty when the call failed.
	State   plugin.PowerState
	Latency time.Duration
	Err     error
	// At is when the answer came back, on the caller's clock.
	At time.Time
	// Identity is the device's own identity as the agent read it; Expect the node's
	// (ExpectedIdentity). Either is "" when it was not known: not checked.
	Identity, Expect string
	// SharesUUID names the other nodes that report the node's systemUUID (cloned VMs):
	// a BMC's GUID cannot tell them apart.
	SharesUUID []string
}

// Mismatch reports whether the device proved another machine's (plugin.KindTargetMismatch).
func (t TargetCheck) Mismatch() bool {
	return t.Err != nil && plugin.KindOf(t.Err) == plugin.KindTargetMismatch
}

// Up reports whether the device answered with a state.
func (t TargetCheck) Up() bool { return t.Err == nil }

// StateText is the read's state as a table shows it: "error" when the call failed.
func (t TargetCheck) StateText() string {
	if t.Err != nil {
		return "error"
	}
	return string(t.State)
}

// ErrText is the read's error as a table shows it, "" when none. It is the agent's
// answer, which never quotes a secret (each agent scrubs its own), with the name of
// the Secret whose credentials the device refused.
func (t TargetCheck) ErrText() string {
	if t.Err == nil {
		return ""
	}
	return t.Err.Error()
}

// Target monitoring defaults: every node's first-level targets are read at start and
// then every DefaultTargetInterval (jittered by up to a tenth), at most
// targetConcurrency at once.
const (
	DefaultTargetInterval = 10 * time.Minute
	targetConcurrency     = 8
)

// CheckTargets reads every node's first-level fence device once through agents, as the
// leader's monitor does (fence-controller check).
func CheckTargets(ctx context.Context, cfg *v1alpha1.Config, agents Source, client kubernetes.Interface, nodes []*corev1.Node) ([]TargetCheck, error) {
	caller, err := New(agents, cfg, client, NewMetrics(nil, nil), time.Now, func() ([]*corev1.Node, error) { return nodes, nil })
	if err != nil {
		return nil, err
	}
	return caller.CheckAll(ctx, cfg.Policies, nodes), nil
}

// CheckAll reads the first-level targets of every node a policy governs, at most
// targetConcurrency at once, and returns the results sorted by node and agent.
func (a *Caller) CheckAll(ctx context.Context, policies []v1alpha1.Policy, nodes []*corev1.Node) []TargetCheck {
	type job struct {
		node  *corev1.Node
		agent string
	}
	var jobs []job
	for _, n := range nodes {
		pol, err := policy.Select(policies, n.Labels)
		if err != nil || pol == nil || len(pol.Levels) == 0 {
			continue // no device to read; the node's own sync reports a bad selector
		}
		for _, agent := range pol.Levels[0].Agents {
			jobs = append(jobs, job{n, agent})
		}
	}
	// Each agent's targets are mapped once for the round, not once for every node.
	owners := map[string]map[string][]string{}
	for _, j := range jobs {
		if _, done := owners[j.agent]; !done {
			if cfg, ok := a.config[j.agent]; ok {
				owners[j.agent], _ = a.targetOwners(cfg) // nil on error: each check lists again and says why
			}
		}
	}
	out := make([]TargetCheck, len(jobs))
	sem := make(chan struct{}, targetConcurrency)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = a.checkTarget(ctx, j.agent, j.node, owners[j.agent])
		}()
	}
	wg.Wait()
	noteShared(out, nodes)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].Agent < out[j].Agent
	})
	return out
}

// checkTarget reads one node's target through agent, bounded by the agent's timeout.
func (a *Caller) checkTarget(ctx context.Context, agent string, node *corev1.Node, owners map[string][]string) TargetCheck {
	tc := TargetCheck{Node: node.Name, Agent: agent, Target: a.TargetFor(agent, node)}
	target, err := a.Resolve(agent, node, owners)
	if err != nil {
		tc.Err = err
		return tc
	}
	req, cfg, err := a.request(ctx, agent, node, target, "", 0)
	if err != nil {
		tc.Err = err
		return tc
	}
	start := a.now()
	res, err := a.invoke(ctx, agent, MethodStatus, req, start.Add(cfg.Timeout.Duration))
	tc.At = a.now()
	tc.Latency = tc.At.Sub(start)
	tc.Identity, tc.Expect = res.Identity, req.ExpectIdentity
	a.countMismatch(agent, err)
	if err != nil {
		// A device that refuses what it was sent: the table says which Secret it was.
		secret, _ := a.secretOf(cfg, node)
		tc.Err = credentialsRefused(err, node, secret)
		return tc
	}
	tc.State = res.State
	return tc
}

// PrintTargetChecks writes checks as a table: node, agent, target, state, the device's
// identity against the node's, latency, error.
func PrintTargetChecks(w io.Writer, checks []TargetCheck) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tAGENT\tTARGET\tSTATE\tIDENTITY\tLATENCY\tERROR")
	for _, tc := range checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tc.Node, tc.Agent, tc.Target, tc.StateText(), IdentityText(tc),
			tc.Latency.Round(time.Millisecond), tc.ErrText())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printShared(w, checks)
}
