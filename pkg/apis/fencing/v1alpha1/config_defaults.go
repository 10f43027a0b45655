package v1alpha1

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Defaults that hold when the file leaves a field empty.
const (
	DefaultLeaseStaleAfter = 30 * time.Second
	DefaultNotReadyAfter   = 30 * time.Second
	DefaultAgentTimeout    = 30 * time.Second
	// DefaultOffDelay and MaxOffDelay: agents[].offDelay, a device's stated delay.
	DefaultOffDelay, MaxOffDelay = 5 * time.Second, 10 * time.Minute
	DefaultHistoryMaxAge         = 30 * 24 * time.Hour
	DefaultHistoryKeepPerNode    = 10
	DefaultLevelTimeout          = 60 * time.Second
	DefaultLevelBackoff          = 2 * time.Second
	DefaultLevelRetries          = 1
	DefaultMaxConcurrent         = 10
	DefaultMaxUnhealthy          = "40%"
	DefaultPluginDir             = "/usr/libexec/kubefence/agents"
	DefaultLeaseNamespace        = "kubefence-system"
	DefaultLeaseName             = "kubefence-controller"
	DefaultFlapWindow            = 10 * time.Minute
	DefaultFlapThreshold         = 3
	DefaultCooldown              = 10 * time.Minute
	DefaultMinWait               = 5 * time.Second
	DefaultExcludeLabel          = "fencing.kubefence.io/exclude"
	// The node agents' default --isolation, and how old an armed report may be.
	DefaultWatchdogIsolation    = 10 * time.Second
	DefaultWatchdogReportMaxAge = 2 * time.Minute
	// DefaultHeartbeatBindAddress is where a replica answers the node agents.
	DefaultHeartbeatBindAddress   = "0.0.0.0:7947"
	DefaultHeartbeatProbeInterval = 500 * time.Millisecond
	DefaultKubeletTimeout         = time.Second
	DefaultKubeletCheckInterval   = time.Minute
	DefaultLeaveGrace             = 2 * time.Minute
)

// WatchdogAgent names the attempts of a watchdog level (Level.Watchdog), where an agent's
// name would be; no agent may be called so.
const WatchdogAgent = "watchdog"

func defaultBool(b **bool, v bool) {
	if *b == nil {
		*b = &v
	}
}

func defaultDuration(d *metav1.Duration, v time.Duration) {
	if d.Duration == 0 {
		d.Duration = v
	}
}

// Default fills every empty field that has a default.
func (c *Config) Default() {
	defaultDuration(&c.Detection.LeaseStaleAfter, DefaultLeaseStaleAfter)
	defaultDuration(&c.Detection.NotReadyAfter, DefaultNotReadyAfter)
	defaultDuration(&c.Detection.FlapWindow, DefaultFlapWindow)
	if c.Detection.FlapThreshold == 0 {
		c.Detection.FlapThreshold = DefaultFlapThreshold
	}
	if c.PluginDir == "" {
		c.PluginDir = DefaultPluginDir
	}
	le := &c.LeaderElection
	if le.Enabled == nil {
		on := true
		le.Enabled = &on
	}
	if le.Namespace == "" {
		le.Namespace = DefaultLeaseNamespace
	}
	if le.Name == "" {
		le.Name = DefaultLeaseName
	}
	defaultDuration(&le.LeaseDuration, 15*time.Second)
	defaultDuration(&le.RenewDeadline, 10*time.Second)
	defaultDuration(&le.RetryPeriod, 2*time.Second)
	defaultDuration(&c.History.MaxAge, DefaultHistoryMaxAge)
	if c.History.KeepPerNode == 0 {
		c.History.KeepPerNode = DefaultHistoryKeepPerNode
	}
	if c.Heartbeats != nil {
		if c.Heartbeats.BindAddress == "" {
			c.Heartbeats.BindAddress = DefaultHeartbeatBindAddress
		}
		defaultDuration(&c.Heartbeats.ProbeInterval, DefaultHeartbeatProbeInterval)
		defaultDuration(&c.Heartbeats.KubeletTimeout, DefaultKubeletTimeout)
		defaultDuration(&c.Heartbeats.KubeletCheckInterval, DefaultKubeletCheckInterval)
		defaultDuration(&c.Heartbeats.LeaveGrace, DefaultLeaveGrace)
	}
	defaultDuration(&c.Watchdog.Isolation, DefaultWatchdogIsolation)
	defaultDuration(&c.Watchdog.ReportMaxAge, DefaultWatchdogReportMaxAge)
	if c.Watchdog.Namespace == "" {
		c.Watchdog.Namespace = le.Namespace
	}
	for i := range c.Agents {
		defaultDuration(&c.Agents[i].Timeout, DefaultAgentTimeout)
		defaultDuration(&c.Agents[i].OnTimeout, c.Agents[i].Timeout.Duration)
		defaultDuration(&c.Agents[i].OffDelay, DefaultOffDelay)
		if nf := c.Agents[i].NetworkFence; nf != nil && len(nf.AddressTypes) == 0 {
			nf.AddressTypes = []string{AddressInternalIP}
		}
	}
	for i := range c.Policies {
		c.Policies[i].Default()
	}
}

// Default fills the policy's empty fields.
func (p *Policy) Default() {
	if p.Action == "" {
		p.Action = ActionOff
	}
	if p.Remediation == "" {
		p.Remediation = StrategyBoth
	}
	if p.Budget.MaxConcurrent == 0 {
		p.Budget.MaxConcurrent = DefaultMaxConcurrent
	}
	if p.Budget.MaxUnhealthy == nil {
		v := intstr.FromString(DefaultMaxUnhealthy)
		p.Budget.MaxUnhealthy = &v
	}
	defaultBool(&p.Budget.PerZone, true)
	defaultDuration(&p.Budget.Cooldown, DefaultCooldown)
	if p.Budget.RateLimit.Burst == 0 {
		p.Budget.RateLimit.Burst = p.Budget.RateLimit.FencesPerMinute
	}
	defaultBool(&p.Budget.ControlPlaneOneAtATime, true)
	if p.ExcludeLabel == "" {
		p.ExcludeLabel = DefaultExcludeLabel
	}
	defaultBool(&p.HonorTolerations, true)
	defaultBool(&p.HonorDisruptionBudgets, true)
	defaultDuration(&p.MinWait, DefaultMinWait)
	p.Maintenance.Default()
	for i := range p.Levels {
		l := &p.Levels[i]
		if l.Mode == "" {
			l.Mode = ModeAll
		}
		defaultDuration(&l.Timeout, DefaultLevelTimeout)
		defaultDuration(&l.Backoff, DefaultLevelBackoff)
		if l.Retries == nil {
			r := int32(DefaultLevelRetries)
			l.Retries = &r
		}
	}
}

var (
	agentName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Validate returns every problem of a defaulted configuration, each with its field path.
func (c *Config) Validate() field.ErrorList {
	var errs field.ErrorList
	d := field.NewPath("detection")
	errs = append(errs, within(d.Child("leaseStaleAfter"), c.Detection.LeaseStaleAfter, time.Second, MaxDetection)...)
	errs = append(errs, within(d.Child("notReadyAfter"), c.Detection.NotReadyAfter, time.Second, MaxDetection)...)
	errs = append(errs, within(d.Child("flapWindow"), c.Detection.FlapWindow, time.Second, MaxFlapWindow)...)
	if c.Detection.ExpectedRenewInterval.Duration != 0 {
		errs = append(errs, within(d.Child("expectedRenewInterval"), c.Detection.ExpectedRenewInterval, MinCallTimeout, MaxDetection)...)
	}
	if c.Detection.FlapThreshold < 2 {
		errs = append(errs, field.Invalid(d.Child("flapThreshold"), c.Detection.FlapThreshold,
			"must be at least 2: one recovery is not a flap"))
	} else {
		errs = append(errs, intWithin(d.Child("flapThreshold"), int64(c.Detection.FlapThreshold), 2, MaxFlapThreshold)...)
	}
	errs = append(errs, c.LeaderElection.validate(field.NewPath("leaderElection"))...)
	h := field.NewPath("history")
	errs = append(errs, within(h.Child("maxAge"), c.History.MaxAge, time.Hour, MaxHistoryAge)...)
	errs = append(errs, intWithin(h.Child("keepPerNode"), int64(c.History.KeepPerNode), 1, MaxHistoryPerNode)...)
	w := field.NewPath("watchdog")
	errs = append(errs, within(w.Child("isolation"), c.Watchdog.Isolation, time.Second, MaxWatchdogIsolation)...)
	errs = append(errs, within(w.Child("reportMaxAge"), c.Watchdog.ReportMaxAge, time.Second, time.Hour)...)
	// The default is leaderElection.namespace, checked there.
	if msgs := validation.IsDNS1123Label(c.Watchdog.Namespace); len(msgs) > 0 && c.Watchdog.Namespace != c.LeaderElection.Namespace {
		errs = append(errs, field.Invalid(w.Child("namespace"), c.Watchdog.Namespace, strings.Join(msgs, "; ")))
	}
	errs = append(errs, c.Heartbeats.validate(field.NewPath("heartbeats"))...)
	errs = append(errs, tooMany(field.NewPath("agents"), len(c.Agents), MaxAgents)...)
	errs = append(errs, tooMany(field.NewPath("policies"), len(c.Policies), MaxPolicies)...)
	agents := map[string]bool{}
	for i, a := range c.Agents {
		p := field.NewPath("agents").Index(i)
		if a.Name == WatchdogAgent {
			errs = append(errs, field.Invalid(p.Child("name"), a.Name, "reserved: the attempts of a watchdog level carry it"))
		}
		if agents[a.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), a.Name))
		}
		agents[a.Name] = true
		errs = append(errs, a.validate(p)...)
	}
	if len(c.Policies) == 0 {
		errs = append(errs, field.Required(field.NewPath("policies"), "at least one policy"))
	}
	names := map[string]bool{}
	for i, pol := range c.Policies {
		p := field.NewPath("policies").Index(i)
		if names[pol.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), pol.Name))
		}
		names[pol.Name] = true
		errs = append(errs, pol.validate(p, agents)...)
		for j, l := range pol.Levels {
			if l.Watchdog && l.Timeout.Duration <= c.Watchdog.Isolation.Duration {
				errs = append(errs, field.Invalid(p.Child("levels").Index(j).Child("timeout"), l.Timeout.Duration.String(),
					fmt.Sprintf("a watchdog level waits isolation (%s) + 2 × the watchdog's timeout: its timeout must be longer", c.Watchdog.Isolation.Duration)))
			}
		}
	}
	return errs
}

func positive(p *field.Path, d metav1.Duration) field.ErrorList {
	if d.Duration <= 0 {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be greater than zero")}
	}
	return nil
}

func (le *LeaderElection) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, d := range []struct {
		name string
		v    metav1.Duration
	}{{"leaseDuration", le.LeaseDuration}, {"renewDeadline", le.RenewDeadline}, {"retryPeriod", le.RetryPeriod}} {
		errs = append(errs, within(p.Child(d.name), d.v, MinCallTimeout, MaxLeaderTiming)...)
	}
	errs = append(errs, dnsLabel(p.Child("namespace"), le.Namespace)...)
	errs = append(errs, dnsSubdomain(p.Child("name"), le.Name)...)
	if le.RenewDeadline.Duration >= le.LeaseDuration.Duration {
		errs = append(errs, field.Invalid(p.Child("renewDeadline"), le.RenewDeadline.Duration.String(), "must be less than leaseDuration"))
	}
	if le.RetryPeriod.Duration >= le.RenewDeadline.Duration {
		errs = append(errs, field.Invalid(p.Child("retryPeriod"), le.RetryPeriod.Duration.String(), "must be less than renewDeadline"))
	}
	return errs
}

func (a *Agent) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case a.Name == "":
		errs = append(errs, field.Required(p.Child("name"), "the name policies give this agent"))
	case !agentName.MatchString(a.Name):
		errs = append(errs, field.Invalid(p.Child("name"), a.Name, "must match "+agentName.String()))
	}
	if a.NetworkFence != nil {
		return append(errs, a.validateNetworkFence(p)...)
	}
	if a.Binary != "" && !agentName.MatchString(a.Binary) {
		errs = append(errs, field.Invalid(p.Child("binary"), a.Binary, "must be a file name in pluginDir matching "+agentName.String()))
	}
	switch {
	case a.Address != "":
		errs = append(errs, a.validateRemote(p)...)
	case !sha256Hex.MatchString(a.SHA256):
		errs = append(errs, field.Invalid(p.Child("sha256"), a.SHA256, "must be 64 lower-case hex digits (or set address for a remote agent)"))
	case a.TLS != nil:
		errs = append(errs, field.Forbidden(p.Child("tls"), "only for a remote agent (address)"))
	}
	errs = append(errs, boundedParams(p.Child("params"), a.Params)...)
	if a.Target.sources() == 0 {
		errs = append(errs, field.Required(p.Child("target"), "one of annotation, label, providerID or template: where the node's target is found"))
	}
	errs = append(errs, a.validateCommon(p)...)
	return append(errs, a.SecretRef.validate(p.Child("secretRef"))...)
}

// sources counts the ways of finding the target that are set.
func (t TargetSource) sources() int {
	set := 0
	for _, on := range []bool{t.Annotation != "", t.Label != "", t.ProviderID, t.Template != ""} {
		if on {
			set++
		}
	}
	return set
}

// validateCommon checks what every kind of agent has: at most one target source, well
// formed, and the call timeouts.
func (a *Agent) validateCommon(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if set := a.Target.sources(); set > 1 {
		errs = append(errs, field.Invalid(p.Child("target"), set, "exactly one of annotation, label, providerID, template must be set"))
	}
	errs = append(errs, within(p.Child("timeout"), a.Timeout, MinCallTimeout, MaxCallTimeout)...)
	if a.OnTimeout != a.Timeout { // defaulted from it otherwise, and checked there
		errs = append(errs, within(p.Child("onTimeout"), a.OnTimeout, MinCallTimeout, MaxCallTimeout)...)
	}
	errs = append(errs, within(p.Child("offDelay"), a.OffDelay, 0, MaxOffDelay)...)
	if a.Target.Annotation != "" {
		errs = append(errs, qualifiedKey(p.Child("target", "annotation"), a.Target.Annotation)...)
	}
	if a.Target.Label != "" {
		errs = append(errs, qualifiedKey(p.Child("target", "label"), a.Target.Label)...)
	}
	if a.Target.Template != "" {
		if _, err := a.Target.TargetTemplate(); err != nil {
			errs = append(errs, field.Invalid(p.Child("target", "template"), a.Target.Template, err.Error()))
		}
	}
	return errs
}

func (a *Agent) validateRemote(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if a.SHA256 != "" || a.Binary != "" {
		errs = append(errs, field.Forbidden(p.Child("address"), "a remote agent has no binary or sha256"))
	}
	errs = append(errs, hostPort(p.Child("address"), a.Address)...)
	if a.TLS == nil {
		return append(errs, field.Required(p.Child("tls"), "a remote agent is reached with mutual TLS"))
	}
	t := p.Child("tls")
	for _, f := range []struct{ name, v string }{{"certFile", a.TLS.CertFile}, {"keyFile", a.TLS.KeyFile}, {"caFile", a.TLS.CAFile}} {
		if f.v == "" {
			errs = append(errs, field.Required(t.Child(f.name), ""))
		}
	}
	return errs
}

func (pol *Policy) validate(p *field.Path, agents map[string]bool) field.ErrorList {
	var errs field.ErrorList
	if pol.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	} else {
		errs = append(errs, dnsLabel(p.Child("name"), pol.Name)...)
	}
	errs = append(errs, boundedSelector(p.Child("nodeSelector"), pol.NodeSelector)...)
	if pol.NodeSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(pol.NodeSelector); err != nil {
			errs = append(errs, field.Invalid(p.Child("nodeSelector"), pol.NodeSelector, err.Error()))
		}
	}
	if pol.Action != ActionOff && pol.Action != ActionReboot {
		errs = append(errs, field.NotSupported(p.Child("action"), pol.Action, []FenceAction{ActionOff, ActionReboot}))
	}
	switch pol.Remediation {
	case StrategyOutOfServiceTaint, StrategyDirect, StrategyBoth:
	default:
		errs = append(errs, field.NotSupported(p.Child("remediation"), pol.Remediation,
			[]RemediationStrategy{StrategyOutOfServiceTaint, StrategyDirect, StrategyBoth}))
	}
	if len(pol.Levels) == 0 {
		errs = append(errs, field.Required(p.Child("levels"), "at least one level"))
	}
	if len(pol.Levels) > MaxLevels {
		errs = append(errs, field.TooMany(p.Child("levels"), len(pol.Levels), MaxLevels))
	}
	for i, l := range pol.Levels {
		errs = append(errs, l.validate(p.Child("levels").Index(i), agents)...)
	}
	errs = append(errs, pol.Budget.validate(p.Child("budget"))...)
	if errList := validation.IsQualifiedName(pol.ExcludeLabel); len(errList) > 0 {
		errs = append(errs, field.Invalid(p.Child("excludeLabel"), pol.ExcludeLabel, strings.Join(errList, "; ")))
	}
	errs = append(errs, within(p.Child("minWait"), pol.MinWait, MinCallTimeout, MaxDetection)...)
	errs = append(errs, pol.Maintenance.validate(p.Child("maintenance"))...)
	return errs
}

func (b *Budget) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, intWithin(p.Child("maxConcurrent"), int64(b.MaxConcurrent), 1, MaxConcurrent)...)
	errs = append(errs, maxUnhealthy(p.Child("maxUnhealthy"), b.MaxUnhealthy)...)
	errs = append(errs, within(p.Child("cooldown"), b.Cooldown, time.Second, MaxCooldown)...)
	r := p.Child("rateLimit")
	errs = append(errs, intWithin(r.Child("fencesPerMinute"), int64(b.RateLimit.FencesPerMinute), 0, MaxFencesPerMin)...)
	errs = append(errs, intWithin(r.Child("burst"), int64(b.RateLimit.Burst), 0, MaxFencesPerMin)...)
	switch {
	case b.RateLimit.Burst < 0 || b.RateLimit.FencesPerMinute < 0:
	case b.RateLimit.FencesPerMinute > 0 && b.RateLimit.Burst == 0:
		errs = append(errs, field.Invalid(r.Child("burst"), b.RateLimit.Burst, "must be at least 1 when fencesPerMinute is set"))
	case b.RateLimit.FencesPerMinute == 0 && b.RateLimit.Burst > 0:
		errs = append(errs, field.Invalid(r.Child("burst"), b.RateLimit.Burst, "needs fencesPerMinute"))
	}
	return errs
}

func (l *Level) validate(p *field.Path, agents map[string]bool) field.ErrorList {
	var errs field.ErrorList
	switch {
	case l.Watchdog && len(l.Agents) > 0:
		errs = append(errs, field.Invalid(p.Child("agents"), l.Agents, "a watchdog level calls no agent: put the agents in a level of their own"))
	case !l.Watchdog && len(l.Agents) == 0:
		errs = append(errs, field.Required(p.Child("agents"), "at least one agent, or watchdog: true"))
	}
	if len(l.Agents) > MaxLevelAgents {
		errs = append(errs, field.TooMany(p.Child("agents"), len(l.Agents), MaxLevelAgents))
	}
	for i, a := range l.Agents {
		if !agents[a] {
			errs = append(errs, field.NotFound(p.Child("agents").Index(i), a))
		}
	}
	if l.Mode != ModeAll && l.Mode != ModeAny {
		errs = append(errs, field.NotSupported(p.Child("mode"), l.Mode, []LevelMode{ModeAll, ModeAny}))
	}
	errs = append(errs, within(p.Child("timeout"), l.Timeout, MinCallTimeout, MaxCallTimeout)...)
	errs = append(errs, within(p.Child("backoff"), l.Backoff, time.Millisecond, MaxBackoff)...)
	if l.Retries != nil {
		errs = append(errs, intWithin(p.Child("retries"), int64(*l.Retries), 0, MaxLevelRetries)...)
	}
	return errs
}

func (h *Heartbeats) validate(p *field.Path) field.ErrorList {
	if h == nil {
		return nil
	}
	var errs field.ErrorList
	if h.KeyFile == "" {
		errs = append(errs, field.Required(p.Child("keyFile"), "the agents' peer key: an answer that keeps a node alive must come from an agent"))
	}
	errs = append(errs, hostPort(p.Child("bindAddress"), h.BindAddress)...)
	if h.AdvertiseAddress != "" {
		errs = append(errs, hostPort(p.Child("advertiseAddress"), h.AdvertiseAddress)...)
	}
	errs = append(errs, within(p.Child("probeInterval"), h.ProbeInterval, 100*time.Millisecond, 10*time.Second)...)
	errs = append(errs, within(p.Child("kubeletCheckInterval"), h.KubeletCheckInterval, time.Second, time.Hour)...)
	errs = append(errs, within(p.Child("leaveGrace"), h.LeaveGrace, time.Second, time.Hour)...)
	return append(errs, within(p.Child("kubeletTimeout"), h.KubeletTimeout, 100*time.Millisecond, 10*time.Second)...)
}
