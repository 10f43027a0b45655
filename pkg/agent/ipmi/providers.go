package ipmi

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strconv"
	"strings"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// Provider names, as the protocol and providers parameters spell them.
const (
	ProviderIPMI    = "ipmi"
	ProviderRedfish = "redfish"
)

// providerClients names the client each provider's evidence mentions.
var providerClients = map[string]string{ProviderIPMI: "ipmitool", ProviderRedfish: "gofish"}

// parseRedfishParams parses the provider and Redfish parameters into p and returns
// every problem, each naming its parameter.
func parseRedfishParams(p *params, get func(string) string) []error {
	var errs []error
	list := get(ParamProviders)
	field := ParamProviders
	if list == "" {
		list, field = get(ParamProtocol), ParamProtocol
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		switch {
		case name != ProviderIPMI && name != ProviderRedfish:
			errs = append(errs, fmt.Errorf("%s: %q is not a provider; want %s or %s", field, name, ProviderIPMI, ProviderRedfish))
		case seen[name]:
			errs = append(errs, fmt.Errorf("%s: %q is listed twice", field, name))
		default:
			seen[name] = true
			p.providers = append(p.providers, name)
		}
	}

	portStr := get(ParamRedfishPort)
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		errs = append(errs, fmt.Errorf("%s: %q is not a port number", ParamRedfishPort, portStr))
	}
	p.redfishPort = port

	insecure := get(ParamInsecure)
	if p.insecure, err = strconv.ParseBool(insecure); err != nil {
		errs = append(errs, fmt.Errorf("%s: %q is not true or false", ParamInsecure, insecure))
	}
	p.caBundle = get(ParamCABundle)
	if p.caBundle != "" {
		if err := checkCABundle(p.caBundle); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ParamCABundle, err))
		}
		if p.insecure {
			errs = append(errs, fmt.Errorf("%s: is true together with %s; a verified connection needs insecure=false", ParamInsecure, ParamCABundle))
		}
	}
	p.systemName = get(ParamSystemName)
	return errs
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
