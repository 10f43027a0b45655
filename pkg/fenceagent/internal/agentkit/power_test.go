package agentkit

import (
	"context"
	"slices"
	"testing"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// device records what Power asks of it; fail makes the named step fail.
type device struct {
	steps []string
	fail  string
}

func (d *device) do(step string) error {
	d.steps = append(d.steps, step)
	if step == d.fail {
		return plugin.Errorf(plugin.KindNotVerified, "%s failed", step)
	}
	return nil
}

func (d *device) Ensure(_ context.Context, want plugin.PowerState) error {
	return d.do("ensure " + string(want))
}

// lockable is a device that can also be locked.
type lockable struct{ device }

func (l *lockable) Lock(context.Context) error   { return l.do("lock") }
func (l *lockable) Unlock(context.Context) error { return l.do("unlock") }

func TestPower(t *testing.T) {
	tests := map[string]struct {
		lockable  bool
		action    plugin.Action
		fail      string
		wantSteps []string
		wantKind  plugin.ErrorKind // "" for success
	}{
		"off":                        {action: plugin.ActionOff, wantSteps: []string{"ensure off"}},
		"on":                         {action: plugin.ActionOn, wantSteps: []string{"ensure on"}},
		"reboot is off then on":      {action: plugin.ActionReboot, wantSteps: []string{"ensure off", "ensure on"}},
		"reboot stops when not off":  {action: plugin.ActionReboot, fail: "ensure off", wantSteps: []string{"ensure off"}, wantKind: plugin.KindNotVerified},
		"reboot reports a failed on": {action: plugin.ActionReboot, fail: "ensure on", wantSteps: []string{"ensure off", "ensure on"}, wantKind: plugin.KindNotVerified},
		"unsupported":                {action: "cycle", wantKind: plugin.KindUnsupported},
		"off then lock":              {lockable: true, action: plugin.ActionOff, wantSteps: []string{"ensure off", "lock"}},
		"no lock unless off":         {lockable: true, action: plugin.ActionOff, fail: "ensure off", wantSteps: []string{"ensure off"}, wantKind: plugin.KindNotVerified},
		"a failed lock fails":        {lockable: true, action: plugin.ActionOff, fail: "lock", wantSteps: []string{"ensure off", "lock"}, wantKind: plugin.KindNotVerified},
		"unlock then on":             {lockable: true, action: plugin.ActionOn, wantSteps: []string{"unlock", "ensure on"}},
		"no on while locked":         {lockable: true, action: plugin.ActionOn, fail: "unlock", wantSteps: []string{"unlock"}, wantKind: plugin.KindNotVerified},
		"reboot leaves locks alone":  {lockable: true, action: plugin.ActionReboot, wantSteps: []string{"ensure off", "ensure on"}},
		"unsupported, lockable":      {lockable: true, action: "", wantKind: plugin.KindUnsupported},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var (
				d *device
				e Ensurer
			)
			if tc.lockable {
				l := &lockable{device{fail: tc.fail}}
				d, e = &l.device, l
			} else {
				d = &device{fail: tc.fail}
				e = d
			}
			err := Power(context.Background(), e, tc.action)
			switch {
			case tc.wantKind == "" && err != nil:
				t.Fatalf("power %s = %v", tc.action, err)
			case tc.wantKind != "" && (err == nil || plugin.KindOf(err) != tc.wantKind):
				t.Fatalf("power %s = %v, want kind %s", tc.action, err, tc.wantKind)
			}
			if !slices.Equal(d.steps, tc.wantSteps) {
				t.Errorf("steps %q, want %q", d.steps, tc.wantSteps)
			}
		})
	}
}
