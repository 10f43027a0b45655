package fencecall

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/netfence"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/policy"
)

// Source hands out agent handles by name; *plugin.Host is one.
type Source interface {
	Agent(name string) (plugin.Agent, error)
}

// Caller turns a fencer step into an agent call for one node: it resolves the node's
// target for the agent, refuses a target two nodes share, reads the agent's Secret into
// the request, bounds the call by its deadline on the controller's clock, and counts
// latency and errors.
type Caller struct {
	agents  Source
	config  map[string]v1alpha1.Agent
	client  kubernetes.Interface
	metrics *Metrics
	// now is the controller's clock: attempt deadlines are on it.
	now func() time.Time
	// templates are the parsed target templates, by agent; secretTemplates the parsed
	// secretRef templates.
	templates, secretTemplates map[string]*template.Template
	// nodes lists every node (from the cache), to find a target two nodes share.
	nodes func() ([]*corev1.Node, error)
	// owned, when set, lists the nodes an agent acts for that name a target, from the node
	// cache's targetIndex: the check that a target is one node's then reads those nodes,
	// not every node (nodes).
	owned func(agent, target string) ([]string, error)
	// policies say which nodes an agent acts for.
	policies []v1alpha1.Policy
}

// New is a Caller for the (validated) agents of cfg, reading Secrets with client; m counts
// its calls (NewMetrics), now is the controller's clock, and nodes lists every node, to
// find a target two nodes share (Index replaces it with a lookup in the node cache).
func New(src Source, cfg *v1alpha1.Config, client kubernetes.Interface, m *Metrics,
	now func() time.Time, nodes func() ([]*corev1.Node, error)) (*Caller, error) {
	a := &Caller{agents: src, config: map[string]v1alpha1.Agent{}, client: client, metrics: m, now: now,
		templates: map[string]*template.Template{}, secretTemplates: map[string]*template.Template{}, nodes: nodes, policies: cfg.Policies}
	for _, cfg := range cfg.Agents {
		a.config[cfg.Name] = cfg
		if ref := cfg.SecretRef; ref != nil && ref.Template != "" {
			t, err := ref.SecretTemplate()
			if err != nil {
				return nil, fmt.Errorf("agent %s: secretRef.template: %w", cfg.Name, err)
			}
			a.secretTemplates[cfg.Name] = t
		}
		if cfg.Target.Template == "" {
			continue
		}
		t, err := cfg.Target.TargetTemplate()
		if err != nil {
			return nil, fmt.Errorf("agent %s: target.template: %w", cfg.Name, err)
		}
		a.templates[cfg.Name] = t
	}
	return a, nil
}

// Resolve names agent's target for node, and checks that no other node the agent acts
// for names it too (owners, from targetOwners; nil: list them).
func (a *Caller) Resolve(name string, node *corev1.Node, owners map[string][]string) (string, error) {
	cfg, ok := a.config[name]
	if !ok {
		return "", plugin.Errorf(plugin.KindPermanent, "agent %s is not configured", name)
	}
	target, err := a.targetOf(cfg, node)
	if err == nil && owners == nil {
		owners, err = a.ownersOf(cfg, target)
	}
	if err == nil {
		err = unshared(cfg, node, target, owners)
	}
	if err != nil {
		return "", err
	}
	return target, nil
}

// request builds the plugin request for agent on node, for incident, with its secrets.
// target is the device: the one an attempt recorded when it was issued, or "" to
// resolve it from the node now.
func (a *Caller) request(ctx context.Context, name string, node *corev1.Node, target, incident string, epoch int64) (plugin.Request, v1alpha1.Agent, error) {
	cfg, ok := a.config[name]
	if !ok {
		return plugin.Request{}, cfg, plugin.Errorf(plugin.KindPermanent, "agent %s is not configured", name)
	}
	if target == "" {
		var err error
		if target, err = a.Resolve(name, node, nil); err != nil {
			return plugin.Request{}, cfg, err
		}
	}
	req := plugin.Request{Node: node.Name, Target: target, Params: maps.Clone(cfg.Params), Epoch: epoch, Incident: incident,
		ExpectIdentity: ExpectedIdentity(node, target)}
	if req.Params == nil {
		req.Params = map[string]string{}
	}
	secrets, err := a.secretsFor(ctx, cfg, node)
	if err != nil {
		return req, cfg, err
	}
	req.Secrets = secrets
	return req, cfg, nil
}

// TargetFor names agent's target for node, for the record; a mapping that fails says so.
func (a *Caller) TargetFor(agent string, node *corev1.Node) string {
	if agent == v1alpha1.WatchdogAgent {
		return "(node " + node.Name + "'s own watchdog)"
	}
	cfg, ok := a.config[agent]
	if !ok {
		return "(agent not configured)"
	}
	t, err := a.targetOf(cfg, node)
	if err != nil {
		return "(none: " + err.Error() + ")"
	}
	return t
}

// targetOf names cfg's target for node.
func (a *Caller) targetOf(cfg v1alpha1.Agent, node *corev1.Node) (string, error) {
	var target, from string
	switch {
	case cfg.Target.Template != "":
		tmpl := a.templates[cfg.Name]
		if tmpl == nil {
			return "", plugin.Errorf(plugin.KindPermanent, "agent %s: target template not parsed", cfg.Name)
		}
		t, err := v1alpha1.ExecuteTarget(tmpl, node)
		if err != nil {
			return "", plugin.Errorf(plugin.KindPermanent, "agent %s: %v", cfg.Name, err)
		}
		return t, nil
	case cfg.Target.Annotation != "":
		target, from = node.Annotations[cfg.Target.Annotation], "annotation "+cfg.Target.Annotation
	case cfg.Target.Label != "":
		target, from = node.Labels[cfg.Target.Label], "label "+cfg.Target.Label
	case cfg.Target.ProviderID:
		target, from = node.Spec.ProviderID, "spec.providerID"
	case cfg.NetworkFence != nil:
		t, err := netfence.NodeTarget(node, cfg.NetworkFence.AddressTypes)
		if err != nil {
			return "", plugin.Errorf(plugin.KindPermanent, "agent %s: %v", cfg.Name, err)
		}
		return t, nil
	}
	if target == "" {
		return "", plugin.Errorf(plugin.KindPermanent, "agent %s: node %s has no %s to name its target", cfg.Name, node.Name, from)
	}
	return target, nil
}

// targetOwners maps each target of agent cfg to the nodes it acts for that name it.
func (a *Caller) targetOwners(cfg v1alpha1.Agent) (map[string][]string, error) {
	owners := map[string][]string{}
	if a.nodes == nil {
		return owners, nil
	}
	nodes, err := a.nodes()
	if err != nil {
		return nil, plugin.Errorf(plugin.KindRetryable, "agent %s: list nodes to check that each target is one node's: %v", cfg.Name, err)
	}
	for _, n := range nodes {
		if !a.actsFor(cfg.Name, n) {
			continue
		}
		if t, err := a.targetOf(cfg, n); err == nil {
			owners[t] = append(owners[t], n.Name)
		}
	}
	return owners, nil
}

// ownersOf maps target to the nodes agent cfg acts for that name it: from the node
// cache's index when the caller has one, by reading every node otherwise.
func (a *Caller) ownersOf(cfg v1alpha1.Agent, target string) (map[string][]string, error) {
	if a.owned == nil {
		return a.targetOwners(cfg)
	}
	names, err := a.owned(cfg.Name, target)
	if err != nil {
		return nil, plugin.Errorf(plugin.KindRetryable, "agent %s: find the nodes that name target %s: %v", cfg.Name, target, err)
	}
	return map[string][]string{target: names}, nil
}

// NetworkFence reports whether agent is a csi-addons NetworkFence agent, whose fence
// holds whether or not its level verified.
func (a *Caller) NetworkFence(agent string) bool {
	cfg, ok := a.config[agent]
	return ok && cfg.NetworkFence != nil
}

// unshared refuses a target that another node, one this agent also acts for, maps to as
// well (owners, from targetOwners): acting on it could power off, or cut the storage of,
// a node that is not the one being fenced. A copied annotation or a naming template that
// drops what tells two nodes apart does that. Nodes whose policies use other agents do
// not count: the agent's parameters, a port say, may set the devices apart.
func unshared(cfg v1alpha1.Agent, node *corev1.Node, target string, owners map[string][]string) error {
	var others []string
	for _, n := range owners[target] {
		if n != node.Name {
			others = append(others, n)
		}
	}
	if len(others) == 0 {
		return nil
	}
	sort.Strings(others)
	if len(others) > 3 {
		others = append(others[:3], fmt.Sprintf("and %d more", len(others)-3))
	}
	return plugin.Errorf(plugin.KindPermanent, "agent %s: target %s of node %s is also the target of node %s; nothing is sent to it until the mapping names one node (agents[].target)",
		cfg.Name, target, node.Name, strings.Join(others, ", "))
}

// actsFor reports whether a level of node's policy names agent.
func (a *Caller) actsFor(agent string, node *corev1.Node) bool {
	pol, err := policy.Select(a.policies, node.Labels)
	if err != nil || pol == nil {
		return false
	}
	for _, l := range pol.Levels {
		if slices.Contains(l.Agents, agent) {
			return true
		}
	}
	return false
}

// Call carries out a DoFence or DoVerify step and returns the event to apply. Fencing
// always asks for off: a Reboot policy powers the node on again only after its workloads
// were released, never inside the fence, so that "verified off" is always read back.
// target is the attempt's recorded device ("" to resolve it now).
func (a *Caller) Call(ctx context.Context, step fencer.Step, node *corev1.Node, target, incident string, epoch int64, deadline time.Time) fencer.Event {
	kind, method := fencer.FenceReturned, Method(step)
	if step.Kind == fencer.DoVerify {
		kind = fencer.StateRead
	}
	ev := fencer.Event{Kind: kind, Level: step.Level, Agent: step.Agent, Try: step.Try}
	req, cfg, err := a.request(ctx, step.Agent, node, target, incident, epoch)
	if err == nil {
		var res plugin.Result
		if d := a.now().Add(cfg.Timeout.Duration); d.Before(deadline) {
			deadline = d
		}
		res, err = a.invoke(ctx, step.Agent, method, req, deadline)
		ev.State, ev.Evidence = string(res.State), res.Evidence
	}
	if err != nil {
		ev.Err, ev.ErrKind = err, plugin.KindOf(err)
		switch {
		case errors.Is(err, plugin.ErrAgentDied):
			ev.ErrKind = plugin.KindAgentDied
		case errors.Is(err, context.DeadlineExceeded):
			// The call's own deadline: its outcome is unknown, and the fencer reads the
			// state back before it does anything else.
			ev.ErrKind = plugin.KindTimeout
		}
		a.metrics.errors.WithLabelValues(step.Agent, method, string(ev.ErrKind)).Inc()
		a.countMismatch(step.Agent, err)
	}
	return ev
}

// invoke calls method of agent name, bounded by deadline on the controller's clock.
func (a *Caller) invoke(ctx context.Context, name, method string, req plugin.Request, deadline time.Time) (plugin.Result, error) {
	agent, err := a.agents.Agent(name)
	if err != nil {
		return plugin.Result{}, fmt.Errorf("agent %s: %w", name, err)
	}
	ctx, cancel := a.withDeadline(ctx, deadline)
	defer cancel()
	start := a.now()
	defer func() { a.metrics.latency.WithLabelValues(name, method).Observe(a.now().Sub(start).Seconds()) }()
	if method == MethodStatus {
		return agent.Status(ctx, req)
	}
	return agent.Fence(ctx, req, plugin.ActionOff)
}

// withDeadline bounds ctx by deadline, a time on the controller's clock. A context's
// deadline is on the wall clock, and the controller's clock may be a test's fake one
// whose times are hours or years away from it: what ctx gets is the time left until
// deadline, read on the controller's clock right before the call. With the real clock
// that is deadline itself, give or take the nanoseconds between the two reads of it.
func (a *Caller) withDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, deadline.Sub(a.now()))
}

// NotPowering says why agent is not one to power a node on for the Reboot action, ""
// when it is: it must offer reboot (power agents do; storage agents offer off and on,
// and a NetworkFence off alone). The node's own watchdog powers nothing.
func (a *Caller) NotPowering(ctx context.Context, name string) string {
	if name == v1alpha1.WatchdogAgent {
		return "the node's own watchdog reset it"
	}
	agent, err := a.agents.Agent(name)
	if err != nil {
		return fmt.Sprintf("agent not available: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, a.config[name].Timeout.Duration)
	defer cancel()
	d, err := agent.Describe(ctx)
	switch {
	case err != nil:
		return fmt.Sprintf("it did not say what it does: %v", err)
	case !slices.Contains(d.Actions, plugin.ActionReboot):
		return fmt.Sprintf("it fences without powering the node off (actions %v); recovery undoes it on the node's new boot", d.Actions)
	}
	return ""
}

// Unfence undoes what an agent's attempt did: powers the node on, restores storage
// access. It goes to the target the attempt recorded, and restore is what the agent's
// Fence calls answered (fencer.FenceEvidenceOf).
func (a *Caller) Unfence(ctx context.Context, at v1alpha1.Attempt, restore string, node *corev1.Node, incident string, epoch int64) (plugin.Result, error) {
	notCalled := plugin.Result{State: plugin.StateUnknown, Evidence: "nothing read back: the call was never made"}
	if at.Agent == v1alpha1.WatchdogAgent {
		return plugin.Result{State: plugin.StateUnknown, Evidence: "nothing to undo: the node's watchdog reset it, and it boots by itself"}, nil
	}
	req, cfg, err := a.request(ctx, at.Agent, node, at.Target, incident, epoch)
	if err != nil {
		return notCalled, err
	}
	req.Restore = restore
	agent, err := a.agents.Agent(at.Agent)
	if err != nil {
		return notCalled, fmt.Errorf("agent %s: %w", at.Agent, err)
	}
	callCtx, cancel := context.WithTimeout(ctx, cfg.OnTimeout.Duration)
	start := a.now()
	res, err := agent.Unfence(callCtx, req)
	cancel()
	a.metrics.latency.WithLabelValues(at.Agent, MethodUnfence).Observe(a.now().Sub(start).Seconds())
	if err == nil {
		return res, nil
	}
	a.metrics.errors.WithLabelValues(at.Agent, MethodUnfence, string(plugin.KindOf(err))).Inc()
	a.countMismatch(at.Agent, err)
	// The outcome of a failed or timed-out Unfence is unknown: a command sent just
	// before the deadline can still have landed. What the target says now is read
	// back with a call of its own, so that the incident records the state, not the
	// error alone.
	readCtx, cancel := context.WithTimeout(ctx, cfg.Timeout.Duration)
	defer cancel()
	start = a.now()
	read, rerr := agent.Status(readCtx, req)
	a.metrics.latency.WithLabelValues(at.Agent, MethodStatus).Observe(a.now().Sub(start).Seconds())
	if rerr != nil {
		a.metrics.errors.WithLabelValues(at.Agent, MethodStatus, string(plugin.KindOf(rerr))).Inc()
		return plugin.Result{State: plugin.StateUnknown, Evidence: "read back failed: " + rerr.Error()}, err
	}
	return read, err
}

// Methods of kubefence_agent_call_duration_seconds and kubefence_agent_errors_total, and
// of the steps' words.
const (
	MethodFence   = "Fence"
	MethodStatus  = "Status"
	MethodUnfence = "Unfence"
)

// Method is the agent method step calls.
func Method(step fencer.Step) string {
	if step.Kind == fencer.DoVerify {
		return MethodStatus
	}
	return MethodFence
}
