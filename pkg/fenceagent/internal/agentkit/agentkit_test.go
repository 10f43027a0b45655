package agentkit

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

var testSpecs = []plugin.Param{
	{Name: "port", Type: plugin.ParamInt, Default: "623"},
	{Name: "timeout", Type: plugin.ParamDuration, Default: "5s"},
	{Name: "poll", Type: plugin.ParamDuration, Default: "1s"},
	{Name: "lock", Type: plugin.ParamBool, Default: "false"},
	{Name: "name", Type: plugin.ParamString},
	{Name: "password", Type: plugin.ParamString, Secret: true},
}

func TestParamReaderDefaultsAndTrim(t *testing.T) {
	r := NewReader(testSpecs, map[string]string{"port": " 6230 ", "lock": "\ttrue", "name": ""})
	r.CheckNames(nil)
	if got := r.Int("port", 1, 65535, "a port number"); got != 6230 {
		t.Errorf("port = %d, want the trimmed 6230", got)
	}
	if got := r.PositiveDuration("timeout"); got != 5*time.Second {
		t.Errorf("timeout = %s, want the default 5s", got)
	}
	if !r.Bool("lock") {
		t.Error("lock = false, want the trimmed true")
	}
	if got := r.String("name"); got != "" {
		t.Errorf("name = %q, want the empty string it was set to", got)
	}
	if err := r.Err(); err != nil {
		t.Errorf("err = %v, want nil", err)
	}
}

// TestParamReaderErrors checks each message and that they come in the order the
// caller read the params, after the name checks.
func TestParamReaderErrors(t *testing.T) {
	r := NewReader(testSpecs, map[string]string{
		"port": "70000", "timeout": "5", "poll": "-1s", "lock": "maybe", "password": "x", "zz": "1", "aa": "2",
	})
	r.CheckNames(nil)
	r.Int("port", 1, 65535, "a port number")
	r.PositiveDuration("timeout")
	r.PositiveDuration("poll")
	r.Bool("lock")
	r.Errorf("name", "%v", fmt.Errorf("wrapped"))
	r.NotLonger("poll", 2*time.Second, "timeout", time.Second)
	r.NotLonger("poll", 2*time.Second, "timeout", 0)
	err := r.Err()
	if plugin.KindOf(err) != plugin.KindPermanent {
		t.Fatalf("err = %v, want a permanent error", err)
	}
	want := []string{
		`aa: unknown parameter`,
		`password: is a secret; pass it in the agent's secret, not in params`,
		`zz: unknown parameter`,
		`port: "70000" is not a port number`,
		`timeout: "5" is not a positive duration`,
		`poll: "-1s" is not a positive duration`,
		`lock: "maybe" is not true or false`,
		`name: wrapped`,
		`poll: 2s is longer than timeout 1s`,
	}
	got := strings.TrimPrefix(err.Error(), "Permanent: ")
	if w := "invalid parameters: " + strings.Join(want, "\n"); got != w {
		t.Errorf("error\n%s\nwant\n%s", got, w)
	}
	// Each problem also travels by name, for the controller to place it in its file.
	var named []string
	for _, p := range plugin.ParamErrors(err) {
		named = append(named, p.Name+": "+p.Detail)
	}
	if !slices.Equal(named, want) {
		t.Errorf("by name:\n%q\nwant\n%q", named, want)
	}
}

func TestParamReaderExtraNames(t *testing.T) {
	var passed []string
	r := NewReader(testSpecs, map[string]string{"port": "1", "password": "x", "b": " v ", "a": "bad"})
	r.CheckNames(func(name, value string) string {
		if value == "bad" {
			return "bad"
		}
		passed = append(passed, name+"="+value)
		return ""
	})
	if !slices.Equal(passed, []string{"b= v "}) {
		t.Errorf("extra got %q, want the untrimmed b only", passed)
	}
	err := r.Err()
	if err == nil || !strings.HasSuffix(err.Error(), "a: bad\npassword: is a secret; pass it in the agent's secret, not in params") {
		t.Errorf("err = %v", err)
	}
}

func TestParsed(t *testing.T) {
	type parsed struct{ port int }
	tests := map[string]struct {
		in      map[string]string
		want    parsed
		wantErr string // "" for none
	}{
		"good":    {in: map[string]string{"port": "6230"}, want: parsed{port: 6230}},
		"default": {in: nil, want: parsed{port: 623}},
		// What was read before the problem is dropped: a caller gets nothing half parsed.
		"bad": {in: map[string]string{"port": "x", "lock": "maybe"}, wantErr: `invalid parameters: port: "x" is not a port number` + "\n" + `lock: "maybe" is not true or false`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := NewReader(testSpecs, tc.in)
			p := parsed{port: r.Int("port", 1, 65535, "a port number")}
			r.Bool("lock")
			got, err := Parsed(r, p)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("parsed = %v, want nil", err)
			case tc.wantErr != "" && (plugin.KindOf(err) != plugin.KindPermanent || Message(err) != tc.wantErr):
				t.Fatalf("parsed = %v, want Permanent: %s", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("parsed %+v, want %+v", got, tc.want)
			}
		})
	}
}
