package agentkit

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/kubefence/kubefence/pkg/plugin"
)

func TestBaseDescribe(t *testing.T) {
	tests := map[string]struct {
		opts        func(b *Base)
		wantVersion string
	}{
		"default version": {opts: func(*Base) {}, wantVersion: "dev"},
		"set version":     {opts: func(b *Base) { b.SetVersion("1.2.3") }, wantVersion: "1.2.3"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := NewBase("x", PowerActions, testSpecs)
			tc.opts(&b)
			d, err := b.Describe(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if d.Name != "x" || d.Version != tc.wantVersion || len(d.Actions) != 3 || len(d.Params) != len(testSpecs) {
				t.Fatalf("description %+v", d)
			}
			d.Params[0].Default = "changed"
			d.Actions[0] = "cycle"
			if testSpecs[0].Default != "623" || PowerActions[0] != plugin.ActionOff {
				t.Error("changing the description changed the specs or the actions")
			}
		})
	}
}

func TestBaseSupports(t *testing.T) {
	storage := []plugin.Action{plugin.ActionOff, plugin.ActionOn}
	tests := map[string]struct {
		actions []plugin.Action
		action  plugin.Action
		wantMsg string // "" when supported
	}{
		"off":               {actions: PowerActions, action: plugin.ActionOff},
		"reboot":            {actions: PowerActions, action: plugin.ActionReboot},
		"on":                {actions: PowerActions, action: plugin.ActionOn},
		"cycle":             {actions: PowerActions, action: "cycle", wantMsg: `action "cycle" is not supported; want off, reboot or on`},
		"empty":             {actions: PowerActions, action: "", wantMsg: `action "" is not supported; want off, reboot or on`},
		"reboot of storage": {actions: storage, action: plugin.ActionReboot, wantMsg: `action "reboot" is not supported; want off or on`},
		"one action":        {actions: []plugin.Action{plugin.ActionOff}, action: plugin.ActionOn, wantMsg: `action "on" is not supported; want off`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := NewBase("x", tc.actions, nil)
			err := b.Supports(tc.action)
			switch {
			case tc.wantMsg == "" && err != nil:
				t.Errorf("supports = %v, want nil", err)
			case tc.wantMsg != "" && (plugin.KindOf(err) != plugin.KindUnsupported || Message(err) != tc.wantMsg):
				t.Errorf("supports = %v, want Unsupported: %s", err, tc.wantMsg)
			}
		})
	}
}

func TestValidator(t *testing.T) {
	parse := Validator[int](func(in map[string]string) (int, error) {
		r := NewReader(testSpecs, in)
		r.CheckNames(nil)
		return Parsed(r, r.Int("port", 1, 65535, "a port number"))
	})
	tests := map[string]struct {
		params  map[string]string
		wantErr string // "" for none
	}{
		"defaults":  {params: nil},
		"good port": {params: map[string]string{"port": "6230"}},
		"bad port":  {params: map[string]string{"port": "0"}, wantErr: `invalid parameters: port: "0" is not a port number`},
		"unknown":   {params: map[string]string{"zz": "1"}, wantErr: `invalid parameters: zz: unknown parameter`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := parse.Validate(context.Background(), tc.params)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("validate = %v, want nil", err)
			case tc.wantErr != "" && (plugin.KindOf(err) != plugin.KindPermanent || Message(err) != tc.wantErr):
				t.Errorf("validate = %v, want Permanent: %s", err, tc.wantErr)
			}
		})
	}
}

func TestApply(t *testing.T) {
	type agent struct{ steps []string }
	type option func(*agent)
	step := func(s string) option { return func(a *agent) { a.steps = append(a.steps, s) } }
	tests := map[string]struct {
		opts []option
		want []string
	}{
		"none":     {opts: nil, want: nil},
		"in order": {opts: []option{step("a"), step("b"), step("a")}, want: []string{"a", "b", "a"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := &agent{}
			if got := Apply(a, tc.opts); got != a {
				t.Fatal("apply returned another agent")
			}
			if !slices.Equal(a.steps, tc.want) {
				t.Errorf("steps = %q, want %q", a.steps, tc.want)
			}
		})
	}
}

func TestUnknown(t *testing.T) {
	if r := Unknown(); r.State != plugin.StateUnknown || strings.TrimSpace(r.Evidence) != "" {
		t.Errorf("unknown = %+v", r)
	}
}
