package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubefence/kubefence/pkg/configfile"
)

const template = `
pluginDir: PLUGINS
agents:
- name: ipmi
  binary: fence-agent-ipmi
  target: {annotation: fencing.kubefence.io/ipmi-address}
  PIN
- name: ipmi-dc2
  address: ipmi-dc2.fencing-dc2.svc:9443
  tls: {certFile: /c/tls.crt, keyFile: /c/tls.key, caFile: /c/ca.crt}
  target: {annotation: fencing.kubefence.io/ipmi-address}
policies:
- name: default
  levels: [{agents: [ipmi]}]
`

func TestRun(t *testing.T) {
	content := []byte("#!/bin/false\nan agent\n")
	sum := sha256.Sum256(content)
	want := hex.EncodeToString(sum[:])
	for name, tc := range map[string]struct {
		pin     string
		wantErr string
	}{
		"filled in":       {},
		"pin that agrees": {pin: "sha256: " + want},
		"pin that differs": {pin: `sha256: "` + strings.Repeat("0", 64) + `"`,
			wantErr: "pinned " + strings.Repeat("0", 64)},
		"pin that is a number": {pin: "sha256: 0123", wantErr: "not a string"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			plugins := filepath.Join(dir, "agents")
			if err := os.Mkdir(plugins, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(plugins, "fence-agent-ipmi"), content, 0o755); err != nil {
				t.Fatal(err)
			}
			tmpl := strings.NewReplacer("PLUGINS", plugins, "PIN", tc.pin).Replace(template)
			in, out := filepath.Join(dir, "template.yaml"), filepath.Join(dir, "config.yaml")
			if err := os.WriteFile(in, []byte(tmpl), 0o644); err != nil {
				t.Fatal(err)
			}
			err := run(in, plugins, out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if _, serr := os.Stat(out); serr == nil {
					t.Error("a config was written despite the mismatch")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := configfile.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Agents[0].SHA256 != want || cfg.Agents[1].SHA256 != "" {
				t.Errorf("sha256 = %q, %q; want %q for the local agent and none for the remote one", cfg.Agents[0].SHA256, cfg.Agents[1].SHA256, want)
			}
		})
	}
}

func TestRunMissingBinary(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "template.yaml")
	if err := os.WriteFile(in, []byte(strings.NewReplacer("PLUGINS", dir, "PIN", "").Replace(template)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(in, dir, filepath.Join(dir, "out.yaml")); err == nil || !strings.Contains(err.Error(), "fence-agent-ipmi") {
		t.Fatalf("err = %v, want a missing fence-agent-ipmi", err)
	}
}
