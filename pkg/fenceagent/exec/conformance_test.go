package exec_test

import (
	"os"
	"path/filepath"
	"testing"

	fenceexec "github.com/kubefence/kubefence/pkg/fenceagent/exec"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/plugin/plugintest"
)

func TestConformance(t *testing.T) {
	var dev device
	ok := newDevice(t, "on")
	notExec := filepath.Join(t.TempDir(), "fence_noexec")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plugintest.Run(t, plugintest.Kit{
		Agent: fenceexec.New(fenceexec.WithVersion("1.0.0-test")),
		NewTarget: func(t *testing.T) plugintest.Target {
			dev = newDevice(t, "on")
			return plugintest.Target{Request: dev.request(), Observe: dev.observe}
		},
		BadParams: map[string]map[string]string{
			"empty script":      {"script": "", "state_file": "/x"},
			"relative script":   {"script": "fence_test"},
			"missing script":    {"script": "/nonexistent/fence_test"},
			"not executable":    {"script": notExec},
			"directory":         {"script": t.TempDir()},
			"line injection":    {"script": ok.script, "ipport": "623\naction=on"},
			"action param":      {"script": ok.script, "action": "on"},
			"target key clash":  {"script": ok.script, "plug": "other"},
			"bad key":           {"script": ok.script, "Bad Key": "x"},
			"password in param": {"script": ok.script, "password": "not-the-real-one"},
			"bad duration":      {"script": ok.script, "verify_timeout": "soon"},
		},
		Secrets:     []string{testPassword},
		Logs:        func() string { return dev.log(t) + readFile(dev.state) },
		Unfenceable: true,
	})
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

var _ plugin.Agent = fenceexec.New()
