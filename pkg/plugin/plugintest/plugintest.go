package plugintest

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// callTimeout bounds every call the kit makes; fencing a real BMC takes seconds.
const callTimeout = time.Minute

// promptly is how soon a call with an expired deadline must return.
const promptly = 5 * time.Second

// secretName matches parameter names that must be declared secret.
var secretName = regexp.MustCompile(`(?i)pass(wd|word)?$|secret|token|credential`)

// Kit describes one agent for Run.
type Kit struct {
	// Agent is the agent under test: an implementation called in-process, or a
	// handle from plugin.Host on a launched or remote agent.
	Agent plugin.Agent
	// NewTarget returns a fresh target, powered on, whose resources are cleaned
	// up with t. Run calls it once.
	NewTarget func(t *testing.T) Target
	// BadParams maps a case name to params Validate must reject; the error must
	// name at least one of that map's keys.
	BadParams map[string]map[string]string
	// Secrets are values that must never appear in any error or Evidence, nor
	// in Logs(). The target's secret values are checked as well.
	Secrets []string
	// Logs, if set, returns the agent's logs captured so far.
	Logs func() string
	// Unfenceable says the agent supports Unfence.
	Unfenceable bool
}

// Target is one thing to fence and an independent way to see its state.
type Target struct {
	// Request addresses the target, with valid params and secrets.
	Request plugin.Request
	// Observe reads the real state from the peer (the BMC's power file, the
	// cloud API, the storage target), never from the agent.
	Observe func() (plugin.PowerState, error)
}

// Run runs the conformance tests against k, as subtests of t.
func Run(t *testing.T, k Kit) {
	t.Helper()
	if k.Agent == nil || k.NewTarget == nil {
		t.Fatal("plugintest: Kit.Agent and Kit.NewTarget must be set")
	}
	r := &runner{kit: k}
	r.target = k.NewTarget(t)
	r.secrets = append(r.secrets, k.Secrets...)
	for _, v := range r.target.Request.Secrets {
		// A very short secret would match ordinary text and prove nothing.
		if len(v) >= 6 {
			r.secrets = append(r.secrets, v)
		}
	}
	t.Run("describe", r.describe)
	t.Run("validate", r.validate)
	t.Run("fence_off", r.fenceOff)
	t.Run("fence_off_idempotent", r.fenceOff)
	t.Run("status_after_off", r.statusAfterOff)
	if k.Unfenceable {
		t.Run("unfence", r.unfence)
	}
	t.Run("expired_deadline", r.expiredDeadline)
	t.Run("secrets_never_leak", r.secretsNeverLeak)
}

// runner holds one Run: the shared target and every text the agent produced.
type runner struct {
	kit     Kit
	target  Target
	secrets []string

	mu    sync.Mutex
	texts []string // errors and evidence, for the secrets check
}

func (r *runner) record(what string, res plugin.Result, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if res.Evidence != "" {
		r.texts = append(r.texts, what+" evidence: "+res.Evidence)
	}
	if err != nil {
		r.texts = append(r.texts, what+" error: "+err.Error())
	}
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

func (r *runner) observe(t *testing.T) plugin.PowerState {
	t.Helper()
	st, err := r.target.Observe()
	if err != nil {
		t.Fatalf("observe target %s: %v", r.target.Request.Target, err)
	}
	return st
}

func (r *runner) describe(t *testing.T) {
	d, err := r.kit.Agent.Describe(callCtx(t))
	r.record("describe", plugin.Result{}, err)
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	if strings.TrimSpace(d.Name) == "" || strings.ContainsAny(d.Name, " \t\n") {
		t.Errorf("name %q: want a non-empty word", d.Name)
	}
	if strings.TrimSpace(d.Version) == "" {
		t.Errorf("version: empty")
	}
	if !slices.Contains(d.Actions, plugin.ActionOff) {
		t.Errorf("actions %v: want off among them", d.Actions)
	}
	for _, a := range d.Actions {
		if a != plugin.ActionOff && a != plugin.ActionOn && a != plugin.ActionReboot {
			t.Errorf("action %q: not in the contract", a)
		}
	}
	byName := map[string]plugin.Param{}
	for _, p := range d.Params {
		checkParam(t, p)
		if _, dup := byName[p.Name]; dup {
			t.Errorf("param %q: described twice", p.Name)
		}
		byName[p.Name] = p
	}
	for name := range r.target.Request.Secrets {
		if p, ok := byName[name]; !ok || !p.Secret {
			t.Errorf("secret %q of the target: not described as a secret param", name)
		}
	}
	for name := range r.target.Request.Params {
		if p, ok := byName[name]; ok && p.Secret {
			t.Errorf("param %q of the target: described as secret but passed in params", name)
		}
	}
}

func checkParam(t *testing.T, p plugin.Param) {
	t.Helper()
	if p.Name == "" {
		t.Errorf("param with an empty name: %+v", p)
		return
	}
	var parse func(string) error
	switch p.Type {
	case plugin.ParamString:
		parse = func(string) error { return nil }
	case plugin.ParamInt:
		parse = func(s string) error { _, err := strconv.Atoi(s); return err }
	case plugin.ParamBool:
		parse = func(s string) error { _, err := strconv.ParseBool(s); return err }
	case plugin.ParamDuration:
		parse = func(s string) error { _, err := time.ParseDuration(s); return err }
	default:
		t.Errorf("param %q: type %q is not one of string, int, bool, duration", p.Name, p.Type)
		return
	}
	if p.Default != "" {
		if err := parse(p.Default); err != nil {
			t.Errorf("param %q: default %q is not a %s: %v", p.Name, p.Default, p.Type, err)
		}
	}
	if secretName.MatchString(p.Name) && !p.Secret {
		t.Errorf("param %q: looks like a credential but is not flagged secret", p.Name)
	}
	if p.Secret && p.Default != "" {
		t.Errorf("param %q: a secret must not have a default", p.Name)
	}
}

func (r *runner) validate(t *testing.T) {
	err := r.kit.Agent.Validate(callCtx(t), r.target.Request.Params)
	r.record("validate", plugin.Result{}, err)
	if err != nil {
		t.Errorf("validate the target's params %v: %v", r.target.Request.Params, err)
	}
	names := make([]string, 0, len(r.kit.BadParams))
	for name := range r.kit.BadParams {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		bad := r.kit.BadParams[name]
		t.Run(name, func(t *testing.T) {
			err := r.kit.Agent.Validate(callCtx(t), bad)
			r.record("validate "+name, plugin.Result{}, err)
			if err == nil {
				t.Fatalf("validate %v: accepted", bad)
			}
			if errors.Is(err, plugin.ErrAgentDied) || plugin.KindOf(err) != plugin.KindPermanent {
				t.Errorf("validate %v = %v: kind %s, want %s", bad, err, plugin.KindOf(err), plugin.KindPermanent)
			}
			named := false
			for key := range bad {
				named = named || strings.Contains(err.Error(), key)
			}
			if !named {
				t.Errorf("validate %v = %q: names none of the params", bad, err)
			}
		})
	}
}

// fenceOff is the first fence and, run again, the idempotence check.
func (r *runner) fenceOff(t *testing.T) {
	res, err := r.kit.Agent.Fence(callCtx(t), r.target.Request, plugin.ActionOff)
	r.record("fence off", res, err)
	if err != nil {
		t.Fatalf("fence off: %v", err)
	}
	if res.State != plugin.StateOff {
		t.Errorf("fence off: result state %q, want off (evidence %q)", res.State, res.Evidence)
	}
	if res.Evidence == "" {
		t.Errorf("fence off: no evidence")
	}
	if st := r.observe(t); st != plugin.StateOff {
		t.Errorf("fence off succeeded but the target is %s", st)
	}
}

func (r *runner) statusAfterOff(t *testing.T) {
	res, err := r.kit.Agent.Status(callCtx(t), r.target.Request)
	r.record("status", res, err)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if res.State != plugin.StateOff {
		t.Errorf("status after off: %q, want off (evidence %q)", res.State, res.Evidence)
	}
}

func (r *runner) unfence(t *testing.T) {
	res, err := r.kit.Agent.Unfence(callCtx(t), r.target.Request)
	r.record("unfence", res, err)
	if err != nil {
		t.Fatalf("unfence: %v", err)
	}
	if res.State != plugin.StateOn {
		t.Errorf("unfence: result state %q, want on", res.State)
	}
	if st := r.observe(t); st != plugin.StateOn {
		t.Errorf("unfence succeeded but the target is %s", st)
	}
}

// expiredDeadline calls with a deadline that has passed: the agent must give up
// at once and never report success it could not have verified in time.
func (r *runner) expiredDeadline(t *testing.T) {
	calls := map[string]func(context.Context) (plugin.Result, error){
		"fence off": func(ctx context.Context) (plugin.Result, error) {
			return r.kit.Agent.Fence(ctx, r.target.Request, plugin.ActionOff)
		},
		"status": func(ctx context.Context) (plugin.Result, error) {
			return r.kit.Agent.Status(ctx, r.target.Request)
		},
	}
	for name, call := range calls {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Nanosecond)
			defer cancel()
			<-ctx.Done()
			start := time.Now()
			res, err := call(ctx)
			elapsed := time.Since(start)
			r.record(name+" expired", res, err)
			if err == nil {
				t.Fatalf("%s with an expired deadline succeeded: %+v", name, res)
			}
			if !isContextError(err) {
				t.Errorf("%s with an expired deadline = %v, want a context error", name, err)
			}
			if elapsed > promptly {
				t.Errorf("%s with an expired deadline took %v", name, elapsed)
			}
		})
	}
}

// isContextError accepts a wrapped context error, or one an agent flattened
// into a plugin.Error that still says so.
func isContextError(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, context.DeadlineExceeded.Error()) || strings.Contains(msg, context.Canceled.Error())
}

func (r *runner) secretsNeverLeak(t *testing.T) {
	if len(r.secrets) == 0 {
		t.Skip("no secrets to look for")
	}
	r.mu.Lock()
	texts := slices.Clone(r.texts)
	r.mu.Unlock()
	if r.kit.Logs != nil {
		texts = append(texts, "logs: "+r.kit.Logs())
	}
	for _, text := range texts {
		for _, s := range r.secrets {
			if s != "" && strings.Contains(text, s) {
				t.Errorf("a secret leaked into %s", redact(text, r.secrets))
			}
		}
	}
}

// redact keeps a failing test's output from becoming the leak.
func redact(text string, secrets []string) string {
	for _, s := range secrets {
		if s != "" {
			text = strings.ReplaceAll(text, s, "<SECRET>")
		}
	}
	return text
}
