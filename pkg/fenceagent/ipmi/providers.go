package ipmi

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// Provider names, as the protocol and providers parameters spell them.
const (
	ProviderIPMI    = "ipmi"
	ProviderRedfish = "redfish"
)

// providerClients names the client each provider's evidence mentions.
var providerClients = map[string]string{ProviderIPMI: "ipmitool", ProviderRedfish: "gofish"}

// parseRedfishParams parses the provider and Redfish parameters into p and records
// every problem in r.
func parseRedfishParams(p *params, r *agentkit.Reader) {
	list := r.String(ParamProviders)
	field := ParamProviders
	if list == "" {
		list, field = r.String(ParamProtocol), ParamProtocol
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		switch {
		case name != ProviderIPMI && name != ProviderRedfish:
			r.Errorf(field, "%q is not a provider; want %s or %s", name, ProviderIPMI, ProviderRedfish)
		case seen[name]:
			r.Errorf(field, "%q is listed twice", name)
		default:
			seen[name] = true
			p.providers = append(p.providers, name)
		}
	}
	p.redfishPort = r.Int(ParamRedfishPort, 1, 65535, "a port number")
	p.insecure = r.Bool(ParamInsecure)
	p.caBundle = r.String(ParamCABundle)
	if p.caBundle != "" {
		if err := checkCABundle(p.caBundle); err != nil {
			r.Errorf(ParamCABundle, "%v", err)
		}
		if p.insecure {
			r.Errorf(ParamInsecure, "is true together with %s; a verified connection needs insecure=false", ParamCABundle)
		}
	}
	p.systemName = r.String(ParamSystemName)
}

// checkCABundle requires at least one certificate and nothing else that fails to parse.
func checkCABundle(bundle string) error {
	rest := []byte(bundle)
	n := 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("PEM block %d is a %s, want CERTIFICATE", n+1, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Errorf("certificate %d: %w", n+1, err)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("no PEM certificate found")
	}
	return nil
}

// parseRedfishState maps a Redfish PowerState. Only "Off" is off; the transitional
// PoweringOff still has power and PoweringOn has not finished, so both are unknown and
// neither verifies a power command. Paused has power.
func parseRedfishState(raw string) plugin.PowerState {
	switch strings.ToLower(strings.TrimSpace(raw)) {
	case "on", "paused":
		return plugin.StateOn
	case "off":
		return plugin.StateOff
	default:
		return plugin.StateUnknown
	}
}

// combinedKind is the kind of a failure of every provider: theirs when they agree,
// otherwise retryable, the one choice that neither gives up early nor claims success.
func combinedKind(kinds []plugin.ErrorKind) plugin.ErrorKind {
	for _, k := range kinds[1:] {
		if k != kinds[0] {
			return plugin.KindRetryable
		}
	}
	return kinds[0]
}
