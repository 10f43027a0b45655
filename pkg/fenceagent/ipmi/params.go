package ipmi

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// Parameter and secret names, as Describe announces them.
const (
	ParamPort          = "port"
	ParamCipherSuite   = "cipherSuite"
	ParamPrivilege     = "privilegeLevel"
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
	// privilege is the IPMI session privilege ipmitool asks for (-L).
	privilege string
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
	{Name: ParamPrivilege, Type: plugin.ParamString, Default: "ADMINISTRATOR",
		Description: "IPMI session privilege level requested (ipmitool -L): OPERATOR is enough for chassis power control and lets the BMC account be an Operator; ADMINISTRATOR is ipmitool's own default"},
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

// parseParams applies defaults and parses the non-secret params, returning every
// problem as one permanent error that names each bad parameter.
func parseParams(in map[string]string) (params, error) {
	var p params
	r := agentkit.NewReader(paramSpecs, in)
	r.CheckNames(nil)
	p.port = r.Int(ParamPort, 1, 65535, "a port number")
	// ipmitool takes the ID as text (-C); it is parsed only to check its range.
	p.cipherSuite = r.String(ParamCipherSuite)
	r.Int(ParamCipherSuite, 0, 17, "a cipher suite ID (0-17)")
	p.privilege = strings.ToUpper(r.String(ParamPrivilege))
	if p.privilege != "OPERATOR" && p.privilege != "ADMINISTRATOR" {
		// USER and CALLBACK cannot control chassis power: a fence through them always fails.
		r.Errorf(ParamPrivilege, "%q; want OPERATOR or ADMINISTRATOR (power control needs Operator)", r.String(ParamPrivilege))
	}
	p.timeout = r.PositiveDuration(ParamTimeout)
	p.verifyTimeout = r.PositiveDuration(ParamVerifyTimeout)
	p.pollInterval = r.PositiveDuration(ParamPollInterval)
	parseRedfishParams(&p, r)
	r.NotLonger(ParamPollInterval, p.pollInterval, ParamVerifyTimeout, p.verifyTimeout)
	return agentkit.Parsed(r, p)
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
	if missing := agentkit.Missing(req.Secrets, SecretUsername, SecretPassword); len(missing) > 0 {
		return params{}, plugin.Errorf(plugin.KindPermanent, "missing secret(s): %s", strings.Join(missing, ", "))
	}
	return p, nil
}

// secrets are the values that must not leave the agent: Scrub takes them out of
// whatever a BMC or a tool echoes back.
func (p params) secrets() []string { return []string{p.password, p.username} }

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
