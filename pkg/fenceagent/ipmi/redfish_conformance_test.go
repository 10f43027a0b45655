package ipmi_test

import (
	"testing"

	"github.com/kubefence/kubefence/pkg/fenceagent/ipmi"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/plugin/plugintest"
	"github.com/kubefence/kubefence/test/sim/redfish"
)

// TestRedfishConformance runs the plugin conformance kit against the Redfish service
// of test/sim, whose own power state is what Observe reads.
func TestRedfishConformance(t *testing.T) {
	t.Parallel()
	plugintest.Run(t, plugintest.Kit{
		Agent: ipmi.New(ipmi.WithVersion("1.0.0-test")),
		NewTarget: func(t *testing.T) plugintest.Target {
			s := startRedfish(t, redfish.Options{})
			return plugintest.Target{
				Request: redfishRequest(s),
				Observe: func() (plugin.PowerState, error) {
					on, err := s.PoweredOn("1")
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
			"unknown protocol":      {ipmi.ParamProtocol: "snmp"},
			"provider listed twice": {ipmi.ParamProviders: "redfish,redfish"},
			"redfish port":          {ipmi.ParamRedfishPort: "0"},
			"ca bundle not pem":     {ipmi.ParamCABundle: "not a certificate"},
			"insecure not a bool":   {ipmi.ParamInsecure: "maybe"},
			"insecure with bundle":  {ipmi.ParamInsecure: "true", ipmi.ParamCABundle: "x"},
		},
		Secrets:     []string{testPassword},
		Unfenceable: true,
	})
}
