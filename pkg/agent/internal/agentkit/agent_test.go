package agentkit

import (
	"context"
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

func TestUnknown(t *testing.T) {
	if r := Unknown(); r.State != plugin.StateUnknown || strings.TrimSpace(r.Evidence) != "" {
		t.Errorf("unknown = %+v", r)
	}
}
