package exec

import (
	"regexp"
	"strings"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// failure is what a known failure text of a ClusterLabs agent (or of what it wraps)
// means.
type failure struct {
	text  string
	kind  plugin.ErrorKind
	cause string
}

// failures are matched against a failed script's output, first match wins. ClusterLabs
// agents exit 1 for every failure (fencing.py's fail() logs its EC_ message, then exits
// EC_GENERIC_ERROR), so only the text tells them apart. The texts are fencing.py's
// (fence-agents 4.12.1) and those of the libraries the agents use, as fence_ipmilan and
// fence_redfish print them.
var failures = []failure{
	{"Unable to connect/login to fencing device", plugin.KindPermanent, "login refused"},
	{"You have to set login password", plugin.KindPermanent, "no password given"},
	{"does not have the correct privileges", plugin.KindPermanent, "the device user lacks the privilege for the action"},
	// fence_ipmilan reports a wrong password this way: ipmitool's "Unable to establish
	// IPMI v2 / RMCP+ session" comes back at once, and the agent calls it a status failure.
	{"Unable to obtain correct plug status or plug is not available", plugin.KindPermanent,
		"wrong credentials or unknown plug (fence_ipmilan reports a wrong password this way)"},
	{"Can not find VM UUID", plugin.KindPermanent, "unknown target"},
	{"WRONG_VERSION_NUMBER", plugin.KindPermanent, "TLS handshake failed: the address serves plain HTTP where HTTPS is expected"},
	{"CERTIFICATE_VERIFY_FAILED", plugin.KindPermanent, "TLS handshake failed: the device's certificate is not trusted"},
	{"SSLError", plugin.KindPermanent, "TLS handshake failed"},
	{"Connection refused", plugin.KindTargetUnreachable, "connection refused"},
	{"No route to host", plugin.KindTargetUnreachable, "no route to the device"},
	{"Connection timed out", plugin.KindTargetUnreachable, "the device did not answer in time"},
	{"Connection lost", plugin.KindTargetUnreachable, "connection to the device lost"},
	{"Timed out waiting to power OFF", plugin.KindNotVerified, "the device took the command but did not read back off in time"},
	{"Timed out waiting to power ON", plugin.KindNotVerified, "the device took the command but did not read back on in time"},
	// fail_usage(): the arguments the agent got are wrong.
	{"Please use '-h' for usage", plugin.KindPermanent, "the agent refused its arguments"},
}

// logPrefix is fencing.py's logging prefix: "2026-11-23 17:38:01,123 ERROR: ".
var logPrefix = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+: `)

// classify returns the kind and cause of a failed script's output; Retryable with no
// cause for a text it does not know.
func classify(output string) (plugin.ErrorKind, string) {
	for _, f := range failures {
		if strings.Contains(output, f.text) {
			return f.kind, f.cause
		}
	}
	return plugin.KindRetryable, ""
}

// clean keeps what a person needs of a script's output: no Python DeprecationWarning
// (fence_ipmilan prints one before anything else), no log timestamps, no blank lines.
func clean(output string) string {
	var keep []string
	lines := strings.Split(output, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], " \t\r")
		if strings.Contains(l, "DeprecationWarning:") {
			// The warning's next line is the offending source line, indented.
			if i+1 < len(lines) && strings.HasPrefix(lines[i+1], " ") {
				i++
			}
			continue
		}
		l = strings.TrimSpace(logPrefix.ReplaceAllString(l, ""))
		if l != "" {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "; ")
}
