package agentkit

import (
	"slices"
	"strings"
	"testing"
)

func TestScrub(t *testing.T) {
	tests := map[string]struct {
		text    string
		secrets []string
		want    string
	}{
		"no secrets":              {text: "plain text", want: "plain text"},
		"each secret":             {text: "key AKIA123 secret s3cr3t! and s3cr3t! again", secrets: []string{"s3cr3t!", "AKIA123"}, want: "key <redacted> secret <redacted> and <redacted> again"},
		"empty secrets ignored":   {text: "user admin", secrets: []string{"", "admin", ""}, want: "user <redacted>"},
		"only empty secrets":      {text: "user admin", secrets: []string{""}, want: "user admin"},
		"secret not there":        {text: "user admin", secrets: []string{"hunter22"}, want: "user admin"},
		"whole text":              {text: "hunter22", secrets: []string{"hunter22"}, want: "<redacted>"},
		"one inside another":      {text: "pw=hunter22!", secrets: []string{"hunter", "hunter22!"}, want: "pw=<redacted>"},
		"longer one given first":  {text: "pw=hunter22!", secrets: []string{"hunter22!", "hunter"}, want: "pw=<redacted>"},
		"overlapping secrets":     {text: "x abcdef y", secrets: []string{"abcd", "cdef"}, want: "x <redacted> y"},
		"overlapping, reversed":   {text: "x abcdef y", secrets: []string{"cdef", "abcd"}, want: "x <redacted> y"},
		"overlapping itself":      {text: "aaaaa", secrets: []string{"aaa"}, want: "<redacted>"},
		"touching secrets":        {text: "adminhunter22 ok", secrets: []string{"admin", "hunter22"}, want: "<redacted> ok"},
		"marker is not rescanned": {text: "red team", secrets: []string{"red", "team"}, want: "<redacted> <redacted>"},
		"multi-byte":              {text: "mot de passe: été!", secrets: []string{"été"}, want: "mot de passe: <redacted>!"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Scrub(tc.text, tc.secrets...)
			if got != tc.want {
				t.Errorf("Scrub(%q, %q) = %q, want %q", tc.text, tc.secrets, got, tc.want)
			}
			for _, s := range tc.secrets {
				if s != "" && strings.Contains(strings.ReplaceAll(got, redacted, "\x00"), s) {
					t.Errorf("%q still holds secret %q", got, s)
				}
			}
		})
	}
}

func TestValues(t *testing.T) {
	got := Values(map[string]string{"b": "2", "a": "1", "empty": "", "c": "3"})
	if !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Errorf("values = %q, want the non-empty ones in key order", got)
	}
	if got := Values(nil); got != nil {
		t.Errorf("values of nil = %q", got)
	}
}

func TestMissing(t *testing.T) {
	got := Missing(map[string]string{"username": "u", "token": ""}, "password", "username", "token")
	if !slices.Equal(got, []string{"password", "token"}) {
		t.Errorf("missing = %q, want password, token in the order asked", got)
	}
}
