package ipmi

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// Parameter and secret names, as Describe announces them.
const (
	ParamPort          = "port"
	ParamCipherSuite   = "cipherSuite"
	ParamTimeout       = "timeout"
	ParamVerifyTimeout = "verifyTimeout"
	ParamPollInterval  = "pollInterval"
	ParamProtocol      = "protocol"
	ParamProviders     = "providers"
	ParamRedfishPort   = "redfishPort"
	ParamCABundle      = "caBundle"
	ParamInsecure      = "insecure"
	ParamSystemName    = "systemName"
	SecretUsername     = "username"
	SecretPassword     = "password"
)

// params is what the driver needs for one BMC, parsed from a Request.
type params struct {
	host        string
	port        int
	cipherSuite string
	// timeout bounds each ipmitool call.
	timeout time.Duration
	// verifyTimeout bounds polling for the requested power state after a power command.
	verifyTimeout time.Duration
	pollInterval  time.Duration
	// providers are the protocols to try, in order, until one reads the power state.
	providers   []string
	redfishPort int
	caBundle    string
	insecure    bool
	systemName  string
	username    string
	password    string
}

// paramSpecs is the single list of parameters: Describe publishes it, Validate checks it.
var paramSpecs = []plugin.Param{
	{Name: ParamPort, Type: plugin.ParamInt, Default: "623",
		Description: "UDP port of the BMC's IPMI LAN interface; a port in the target (host:port) takes precedence"},
	{Name: ParamCipherSuite, Type: plugin.ParamString, Default: "3",
		Description: "IPMI v2 (lanplus) cipher suite ID, 0-17"},
	{Name: ParamTimeout, Type: plugin.ParamDuration, Default: "5s",
		Description: "time limit of each call to the BMC"},
	{Name: ParamVerifyTimeout, Type: plugin.ParamDuration, Default: "20s",
		Description: "how long to poll for the requested power state after a power command; not reaching it fails the call"},
	{Name: ParamPollInterval, Type: plugin.ParamDuration, Default: "250ms",
		Description: "pause between power state reads while verifying"},
	{Name: ParamProtocol, Type: plugin.ParamString, Default: ProviderIPMI,
		Description: "how to reach the BMC: ipmi (IPMI v2 lanplus via ipmitool) or redfish (bmclib's gofish provider); providers, when set, takes precedence"},
	{Name: ParamProviders, Type: plugin.ParamString,
		Description: "comma-separated protocols tried in order per call until one reads the power state, e.g. redfish,ipmi; each one tried and why it failed goes into the evidence"},
	{Name: ParamRedfishPort, Type: plugin.ParamInt, Default: "443",
		Description: "TCP port of the BMC's Redfish service; a port in the target takes precedence when only one provider is used"},
	{Name: ParamCABundle, Type: plugin.ParamString,
		Description: "PEM certificates of the CAs that sign the BMCs' Redfish certificates; empty means the system roots"},
	{Name: ParamInsecure, Type: plugin.ParamBool, Default: "false",
		Description: "true skips verification of the Redfish certificate; only for BMCs whose certificate cannot be trusted otherwise"},
	{Name: ParamSystemName, Type: plugin.ParamString,
		Description: "Name of the Redfish ComputerSystem to act on; required when the service has more than one"},
	{Name: SecretUsername, Type: plugin.ParamString, Secret: true, Required: true,
		Description: "BMC user name"},
	{Name: SecretPassword, Type: plugin.ParamString, Secret: true, Required: true,
		Description: "BMC password; passed to ipmitool in a 0600 file, to Redfish in the session login over TLS; never on a command line, in an environment or a log"},
}

// validateParams checks non-secret params and returns every problem, each naming its parameter.
func validateParams(in map[string]string) error {
	_, err := parseParams(in)
	return err
}

// parseParams applies defaults and parses the non-secret params.
func parseParams(in map[string]string) (params, error) {
	var p params
	var errs []error
	known := map[string]plugin.Param{}
	for _, s := range paramSpecs {
		known[s.Name] = s
	}
	for _, name := range sortedKeys(in) {
		spec, ok := known[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: unknown parameter", name))
		case spec.Secret:
			errs = append(errs, fmt.Errorf("%s: is a secret; pass it in the agent's secret, not in params", name))
		}
	}
	get := func(name string) string {
		if v, ok := in[name]; ok {
			return strings.TrimSpace(v)
		}
		return known[name].Default
	}

	portStr := get(ParamPort)
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		errs = append(errs, fmt.Errorf("%s: %q is not a port number", ParamPort, portStr))
	}
	p.port = port

	p.cipherSuite = get(ParamCipherSuite)
	if cs, err := strconv.Atoi(p.cipherSuite); err != nil || cs < 0 || cs > 17 {
		errs = append(errs, fmt.Errorf("%s: %q is not a cipher suite ID (0-17)", ParamCipherSuite, p.cipherSuite))
	}

	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{ParamTimeout, &p.timeout}, {ParamVerifyTimeout, &p.verifyTimeout}, {ParamPollInterval, &p.pollInterval}} {
		v := get(d.name)
		parsed, err := time.ParseDuration(v)
		if err != nil || parsed <= 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a positive duration", d.name, v))
			continue
		}
		*d.dst = parsed
	}
	errs = append(errs, parseRedfishParams(&p, get)...)
	if p.pollInterval > 0 && p.verifyTimeout > 0 && p.pollInterval > p.verifyTimeout {
		errs = append(errs, fmt.Errorf("%s: %s is longer than %s %s", ParamPollInterval, p.pollInterval, ParamVerifyTimeout, p.verifyTimeout))
	}
	if len(errs) > 0 {
		return params{}, plugin.Errorf(plugin.KindPermanent, "invalid parameters: %v", errors.Join(errs...))
	}
	return p, nil
}

// parseRequest parses everything the driver needs from req, or fails permanently:
// a bad request does not get better by retrying.
func parseRequest(req plugin.Request) (params, error) {
	p, err := parseParams(req.Params)
	if err != nil {
		return params{}, err
	}
	host, port, err := splitTarget(req.Target)
	if err != nil {
		return params{}, plugin.Errorf(plugin.KindPermanent, "target: %v", err)
	}
	p.host = host
	if port != 0 {
		switch {
		case len(p.providers) > 1:
			return params{}, plugin.Errorf(plugin.KindPermanent,
				"target: %q has a port, which is ambiguous with providers %s; set %s and %s instead",
				req.Target, strings.Join(p.providers, ","), ParamPort, ParamRedfishPort)
		case p.providers[0] == ProviderRedfish:
			p.redfishPort = port
		default:
			p.port = port
		}
	}
	p.username = req.Secrets[SecretUsername]
	p.password = req.Secrets[SecretPassword]
	var missing []string
	if p.username == "" {
		missing = append(missing, SecretUsername)
	}
	if p.password == "" {
		missing = append(missing, SecretPassword)
	}
	if len(missing) > 0 {
		return params{}, plugin.Errorf(plugin.KindPermanent, "missing secret(s): %s", strings.Join(missing, ", "))
	}
	return p, nil
}

// splitTarget accepts "host", "host:port", "[v6]:port" and a bare IPv6 address.
func splitTarget(target string) (string, int, error) {
	target = strings.TrimSpace(target)
	if target == "" {
		return "", 0, errors.New("empty; want a BMC host or host:port")
	}
	if strings.HasPrefix(target, "-") {
		// ipmitool would take it for an option.
		return "", 0, fmt.Errorf("%q is not a host name", target)
	}
	host, portStr, err := net.SplitHostPort(target)
	if err != nil {
		if strings.Count(target, ":") > 1 || !strings.Contains(target, ":") {
			return strings.Trim(target, "[]"), 0, nil
		}
		return "", 0, fmt.Errorf("%q: %w", target, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return "", 0, fmt.Errorf("%q is not host:port", target)
	}
	return host, port, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
