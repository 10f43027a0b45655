package configfile

import (
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

const minimal = `
agents:
- name: ipmi
  sha256: "0000000000000000000000000000000000000000000000000000000000000000"
  target: {annotation: fencing.kubefence.io/bmc}
policies:
- name: default
  levels: [{agents: [ipmi]}]
`

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	d, p := cfg.Detection, cfg.Policies[0]
	if d.FlapWindow.Duration != 10*time.Minute || d.FlapThreshold != 3 {
		t.Errorf("detection defaults: %+v", d)
	}
	b := p.Budget
	if !*b.PerZone || b.Cooldown.Duration != 10*time.Minute || !*b.ControlPlaneOneAtATime ||
		b.RateLimit.FencesPerMinute != 0 || b.RateLimit.Burst != 0 {
		t.Errorf("budget defaults: %+v", b)
	}
	if p.Paused || p.DryRun || cfg.Paused || cfg.DryRun || p.SkipIfNothingToRelease {
		t.Errorf("switches must default off: %+v", p)
	}
	if p.ExcludeLabel != v1alpha1.DefaultExcludeLabel || !*p.HonorTolerations || !*p.HonorDisruptionBudgets || p.MinWait.Duration != 5*time.Second ||
		p.Maintenance.MaxWindow.Duration != time.Hour || p.Maintenance.Cordoned != v1alpha1.CordonWhenDrained {
		t.Errorf("policy defaults: %+v", p)
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := map[string]struct {
		extra string // appended to the policy, or a top-level block when it starts unindented
		want  string
	}{
		"flap threshold of one":      {extra: "detection: {flapThreshold: 1}", want: "detection.flapThreshold: Invalid value: 1"},
		"negative flap window":       {extra: "detection: {flapWindow: -1m}", want: "detection.flapWindow"},
		"negative cooldown":          {extra: "  budget: {cooldown: -1s}", want: "policies[0].budget.cooldown"},
		"negative rate":              {extra: "  budget: {rateLimit: {fencesPerMinute: -1}}", want: "policies[0].budget.rateLimit.fencesPerMinute"},
		"burst without a rate":       {extra: "  budget: {rateLimit: {burst: 3}}", want: "policies[0].budget.rateLimit.burst"},
		"bad exclude label":          {extra: "  excludeLabel: 'not a label!'", want: "policies[0].excludeLabel"},
		"negative minWait":           {extra: "  minWait: -5s", want: "policies[0].minWait"},
		"unknown budget field":       {extra: "  budget: {perzone: true}", want: `policies[0].budget.perzone: Forbidden: unknown field; did you mean "perZone"?`},
		"rate with its own burst":    {extra: "  budget: {rateLimit: {fencesPerMinute: 2, burst: 4}}"},
		"rate, default burst":        {extra: "  budget: {rateLimit: {fencesPerMinute: 2}}"},
		"renew interval 0s: unknown": {extra: "detection: {expectedRenewInterval: 0s}"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			doc := minimal + tc.extra + "\n"
			cfg, err := Parse([]byte(doc))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ParseConfig: %v", err)
			case tc.want == "":
				if rl := cfg.Policies[0].Budget.RateLimit; rl.Burst < rl.FencesPerMinute {
					t.Errorf("rate limit %+v", rl)
				}
			case err == nil || !strings.Contains(err.Error(), tc.want):
				t.Errorf("ParseConfig error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
