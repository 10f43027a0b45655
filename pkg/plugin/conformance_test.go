package plugin_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/plugin/plugintest"
)

const conformancePassword = "conformance-pw-4e8a1c"

// TestConformanceTestAgent runs the conformance kit against the test agent as
// the controller reaches it: launched by a Host, and remote over mutual TLS.
func TestConformanceTestAgent(t *testing.T) {
	dir, name, sum := plugin.AgentBinaryForTest()
	modes := map[string]func(t *testing.T) (plugin.AgentSpec, func() string){
		"launched": func(*testing.T) (plugin.AgentSpec, func() string) {
			return plugin.AgentSpec{SHA256: sum}, nil
		},
		"remote": func(t *testing.T) (plugin.AgentSpec, func() string) {
			f := plugin.NewRemoteFixture(t)
			srv := plugin.StartServe(t, f, "127.0.0.1:0")
			return f.Spec(srv.Addr), srv.Logs
		},
	}
	for mode, setup := range modes {
		t.Run(mode, func(t *testing.T) {
			spec, serverLogs := setup(t)
			var logs plugin.SyncBuffer
			logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &logs})
			h, err := plugin.NewHost(plugin.HostConfig{Dir: dir, Agents: map[string]plugin.AgentSpec{name: spec}, Logger: logger})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(h.Close)
			agent, err := h.Agent(name)
			if err != nil {
				t.Fatal(err)
			}
			plugintest.Run(t, plugintest.Kit{
				Agent:     agent,
				NewTarget: newStateFileTarget,
				BadParams: map[string]map[string]string{"empty state_dir": {"state_dir": ""}},
				Secrets:   []string{conformancePassword},
				Logs: func() string {
					out := logs.String()
					if serverLogs != nil {
						out += serverLogs()
					}
					return out
				},
				Unfenceable: true,
			})
		})
	}
}

// newStateFileTarget is a target of the test agent: its power is a file.
func newStateFileTarget(t *testing.T) plugintest.Target {
	dir := t.TempDir()
	return plugintest.Target{
		Request: plugin.Request{
			Node: "node-1", Target: "bmc-1",
			Params:  map[string]string{"state_dir": dir},
			Secrets: map[string]string{"password": conformancePassword},
			Epoch:   1,
		},
		Observe: func() (plugin.PowerState, error) {
			b, err := os.ReadFile(filepath.Join(dir, "bmc-1"))
			if errors.Is(err, os.ErrNotExist) {
				return plugin.StateOn, nil
			}
			return plugin.PowerState(strings.TrimSpace(string(b))), err
		},
	}
}
