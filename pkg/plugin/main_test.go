package plugin

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestMainCommandLine(t *testing.T) {
	f := NewRemoteFixture(t)
	agent := &fakeAgent{describe: func(context.Context) (Description, error) {
		return Description{Name: "fake", Version: "1.2.3"}, nil
	}}
	tests := map[string]struct {
		args       []string
		wantCode   int
		wantStdout string
		wantStderr []string
	}{
		"version":         {args: []string{"-version"}, wantStdout: "fake 1.2.3\n"},
		"unknown command": {args: []string{"fence"}, wantCode: 2, wantStderr: []string{`unknown command "fence"`, "usage:"}},
		"serve without flags": {args: []string{"serve"}, wantCode: 2, wantStderr: []string{
			"--listen: must be set", "--cert: must be set", "--key: must be set", "--client-ca: must be set"}},
		"serve with unreadable cert": {
			args:     []string{"serve", "--listen", "127.0.0.1:0", "--cert", "/nonexistent.pem", "--key", f.ServerKey, "--client-ca", f.Client.CAFile},
			wantCode: 1, wantStderr: []string{"load server certificate /nonexistent.pem"},
		},
		"serve on a bad address": {
			args:     []string{"serve", "--listen", "256.0.0.1:1", "--cert", f.ServerCert, "--key", f.ServerKey, "--client-ca", f.Client.CAFile},
			wantCode: 1, wantStderr: []string{"listen:"},
		},
		"serve until the context ends": {
			args:       []string{"serve", "--listen", "127.0.0.1:0", "--cert", f.ServerCert, "--key", f.ServerKey, "--client-ca", f.Client.CAFile},
			wantStderr: []string{"serving on 127.0.0.1:"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// A cancelled context makes serve mode return as soon as it listens.
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			var stdout, stderr bytes.Buffer
			code := run(ctx, append([]string{"fence-agent-fake"}, tc.args...), agent, &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.wantCode, stderr.String())
			}
			if stdout.String() != tc.wantStdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tc.wantStdout)
			}
			for _, w := range tc.wantStderr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}
