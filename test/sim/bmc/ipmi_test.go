package bmc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// startSim starts one BMC and stops it when the test ends.
func startSim(t *testing.T, opts IPMIOptions) *IPMISim {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := StartIPMI(ctx, opts)
	if err != nil {
		t.Fatalf("start ipmi sim: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop ipmi sim: %v", err)
		}
	})
	return s
}

func TestStartThreeAndPowerOff(t *testing.T) {
	sims := make([]*IPMISim, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range sims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sims[i], errs[i] = StartIPMI(ctx, IPMIOptions{
				Dir: t.TempDir(), User: "root", Password: fmt.Sprintf("pw-%d", i), PoweredOn: true,
			})
		}()
	}
	wg.Wait()
	for i, s := range sims {
		if s != nil {
			t.Cleanup(func() { _ = s.Stop() })
		}
		if errs[i] != nil {
			t.Fatalf("start sim %d: %v", i, errs[i])
		}
	}
	ports := map[int]bool{}
	for _, s := range sims {
		if ports[s.Port()] {
			t.Fatalf("two sims on port %d", s.Port())
		}
		ports[s.Port()] = true
	}

	before := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := sims[1].ipmitool(ctx, "power", "off"); err != nil {
		t.Fatalf("power off: %v", err)
	} else if !strings.Contains(out, "Down/Off") {
		t.Fatalf("power off output %q", out)
	}
	for i, s := range sims {
		on, err := s.PoweredOn()
		if err != nil {
			t.Fatal(err)
		}
		if want := i != 1; on != want {
			t.Errorf("sim %d powered on = %v, want %v", i, on, want)
		}
	}
	out, err := sims[1].ipmitool(ctx, "power", "status")
	if err != nil || !strings.Contains(out, "Chassis Power is off") {
		t.Errorf("power status after off = %q, %v", out, err)
	}
	events, err := sims[1].Events()
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Action != ActionOff || events[0].Source != "bmc" {
		t.Fatalf("events = %+v, want one off from bmc", events)
	}
	if d := events[0].Time.Sub(before); d < 0 || d > 10*time.Second {
		t.Errorf("event time %v is %v after the request started", events[0].Time, d)
	}
	if ev, _ := sims[0].Events(); len(ev) != 0 {
		t.Errorf("untouched sim has events %+v", ev)
	}
}

func TestIgnorePowerOff(t *testing.T) {
	s := startSim(t, IPMIOptions{PoweredOn: true, IgnorePowerOff: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.ipmitool(ctx, "power", "off"); err != nil {
		t.Fatalf("power off: %v", err)
	}
	if on, err := s.PoweredOn(); err != nil || !on {
		t.Fatalf("powered on = %v, %v; a broken BMC keeps power on", on, err)
	}
	events, err := s.Events()
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Action != ActionIgnoredOff {
		t.Fatalf("events = %+v, want one ignored-off", events)
	}
}

func TestSetPowerAndEvents(t *testing.T) {
	s := startSim(t, IPMIOptions{PoweredOn: false})
	if err := s.SetPower(true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := s.ipmitool(ctx, "power", "status")
	if err != nil || !strings.Contains(out, "Chassis Power is on") {
		t.Fatalf("power status after SetPower(true) = %q, %v", out, err)
	}
	if _, err := s.ipmitool(ctx, "power", "reset"); err != nil {
		t.Fatalf("power reset: %v", err)
	}
	events, err := s.Events()
	if err != nil {
		t.Fatal(err)
	}
	want := []PowerEvent{{Action: ActionOn, Source: "sim"}, {Action: ActionReset, Source: "bmc"}}
	if len(events) != len(want) {
		t.Fatalf("events = %+v, want %+v", events, want)
	}
	for i, e := range events {
		if e.Action != want[i].Action || e.Source != want[i].Source {
			t.Errorf("event %d = %+v, want %+v", i, e, want[i])
		}
		if i > 0 && e.Time.Before(events[i-1].Time) {
			t.Errorf("event %d is older than event %d", i, i-1)
		}
	}
}

func TestStopLeavesNoProcess(t *testing.T) {
	s := startSim(t, IPMIOptions{PoweredOn: true})
	pid := s.PID()
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("/proc/%d still exists after Stop (err %v)", pid, err)
	}
}

func TestStartRequiresDir(t *testing.T) {
	if _, err := StartIPMI(context.Background(), IPMIOptions{}); err == nil {
		t.Fatal("StartIPMI without Dir succeeded")
	}
}

func TestParseEvents(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []PowerEvent
		wantErr bool
	}{
		"empty": {in: ""},
		"two lines": {
			in: "1795308179.203675557 off bmc\n1795308180.5 on sim\n",
			want: []PowerEvent{
				{Time: time.Unix(1795308179, 203675557), Action: "off", Source: "bmc"},
				{Time: time.Unix(1795308180, 500000000), Action: "on", Source: "sim"},
			},
		},
		"blank lines skipped": {
			in:   "\n1795308179 ignored-off bmc\n\n",
			want: []PowerEvent{{Time: time.Unix(1795308179, 0), Action: "ignored-off", Source: "bmc"}},
		},
		"bad timestamp": {in: "abc off bmc\n", wantErr: true},
		"missing field": {in: "1795308179.1 off\n", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseEvents([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if !got[i].Time.Equal(tc.want[i].Time) || got[i].Action != tc.want[i].Action || got[i].Source != tc.want[i].Source {
					t.Errorf("event %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
