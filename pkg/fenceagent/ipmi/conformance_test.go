package ipmi_test

import (
	"testing"

	"github.com/kubefence/kubefence/pkg/fenceagent/ipmi"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/plugin/plugintest"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// TestConformance runs the plugin conformance kit against a real ipmi_sim BMC,
// whose power file is what Observe reads.
func TestConformance(t *testing.T) {
	t.Parallel()
	plugintest.Run(t, plugintest.Kit{
		Agent: ipmi.New(ipmi.WithVersion("1.0.0-test")),
		NewTarget: func(t *testing.T) plugintest.Target {
			s := startBMC(t, bmc.IPMIOptions{PoweredOn: true})
			return plugintest.Target{
				Request: requestFor(s),
				Observe: func() (plugin.PowerState, error) {
					on, err := s.PoweredOn()
					switch {
					case err != nil:
						return plugin.StateUnknown, err
					case on:
						return plugin.StateOn, nil
					default:
						return plugin.StateOff, nil
					}
				},
			}
		},
		BadParams: map[string]map[string]string{
			"port out of range":  {ipmi.ParamPort: "70000"},
			"cipher suite":       {ipmi.ParamCipherSuite: "99"},
			"negative timeout":   {ipmi.ParamTimeout: "-1s"},
			"unknown parameter":  {"colour": "red"},
			"password in params": {ipmi.SecretPassword: "not-the-real-one"},
			"poll beyond verify": {ipmi.ParamPollInterval: "10s", ipmi.ParamVerifyTimeout: "1s"},
			"not a duration":     {ipmi.ParamVerifyTimeout: "soon"},
			"empty cipher suite": {ipmi.ParamCipherSuite: ""},
		},
		Secrets:     []string{testPassword},
		Unfenceable: true,
	})
}
