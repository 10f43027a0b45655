package agentkit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

func TestEvidence(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.FixedZone("CET", 3600))
	tests := map[string]struct {
		secrets []string
		notes   [][]any // format, then args
		want    []string
	}{
		"nothing noted": {},
		"stamped in UTC": {
			notes: [][]any{{"read %s", plugin.StateOn}, {"sent power %s", "off"}},
			want:  []string{"2026-01-02T02:04:05.678Z read on", "2026-01-02T02:04:05.678Z sent power off"},
		},
		"each secret scrubbed": {
			secrets: []string{"hunter22", "", "operator"},
			notes:   [][]any{{"login %s/%s refused", "operator", "hunter22"}},
			want:    []string{"2026-01-02T02:04:05.678Z login <redacted>/<redacted> refused"},
		},
		"a secret in the stamp is scrubbed too": {
			secrets: []string{"2026-01"},
			notes:   [][]any{{"read on"}},
			want:    []string{"<redacted>-02T02:04:05.678Z read on"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := NewEvidence(tc.secrets...)
			e.now = func() time.Time { return at }
			for _, n := range tc.notes {
				e.Note(n[0].(string), n[1:]...)
			}
			got := e.Steps()
			if !slices.Equal(got, tc.want) {
				t.Fatalf("steps %q, want %q", got, tc.want)
			}
			if len(got) > 0 {
				got[0] = "changed"
				if e.Steps()[0] == "changed" {
					t.Error("Steps returned the record itself, not a copy")
				}
			}
			res := e.Result(plugin.StateOff)
			if res.State != plugin.StateOff || res.Evidence != strings.Join(tc.want, "; ") {
				t.Errorf("result %+v", res)
			}
		})
	}
}

func TestEvidenceScrub(t *testing.T) {
	var zero Evidence
	if got := zero.Scrub("pw hunter22"); got != "pw hunter22" {
		t.Errorf("zero evidence scrubbed %q", got)
	}
	e := NewEvidence("hunter22")
	if got := e.Scrub("pw hunter22"); got != "pw <redacted>" {
		t.Errorf("scrub = %q", got)
	}
}

func TestMessage(t *testing.T) {
	typed := plugin.Errorf(plugin.KindPermanent, "credentials rejected")
	tests := map[string]struct {
		err  error
		want string
	}{
		"nil":                  {err: nil, want: ""},
		"plain":                {err: errors.New("exit status 1"), want: "exit status 1"},
		"plugin error":         {err: typed, want: "credentials rejected"},
		"wrapped plugin error": {err: fmt.Errorf("read: %w", typed), want: "credentials rejected"},
		"wrapped plain":        {err: fmt.Errorf("read: %w", context.DeadlineExceeded), want: "read: context deadline exceeded"},
		"again":                {err: Again(typed), want: "credentials rejected"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Message(tc.err); got != tc.want {
				t.Errorf("message = %q, want %q", got, tc.want)
			}
		})
	}
}
