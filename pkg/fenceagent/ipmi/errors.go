package ipmi

import (
	"context"
	"errors"
	"strings"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// Phrases in ipmitool's output (with -v) that mean the BMC answered and refused the
// credentials, the cipher suite or the privilege level asked for. Retrying will not
// change that.
var authPhrases = []string{
	"rakp",                             // "RAKP 2 HMAC is invalid", "RAKP 2 message indicates an error : unauthorized name"
	"unauthorized name",                // unknown user
	"hmac is invalid",                  // wrong password
	"password",                         // "invalid password", "password too long"
	"invalid authentication algorithm", // cipher suite the BMC does not offer
	"insufficient privilege",
	"unauthorized role",
	"set session privilege level", // "Set Session Privilege Level to ADMINISTRATOR failed": an Operator-only account
}

// Phrases that mean nothing usable answered.
var unreachablePhrases = []string{
	"get auth capabilities error",
	"error issuing get channel authentication",
	"address lookup",
	"could not open socket",
	"no response",
	"timeout",
	"timed out",
	"connection refused",
	"network is unreachable",
	"no route to host",
	"unable to establish", // after the auth phrases had their chance
}

// classify turns a failure of a BMC call into a plugin error of the right kind, with
// every secret scrubbed from its text. what says what the driver was doing.
func classify(err error, what, provider string, p params) error {
	if err == nil {
		return nil
	}
	var pe *plugin.Error
	if errors.As(err, &pe) {
		return plugin.Errorf(pe.Kind, "%s", agentkit.Scrub(what+": "+pe.Message, p.secrets()...))
	}
	msg := agentkit.Scrub(what+": "+oneLine(err.Error()), p.secrets()...)
	lower := strings.ToLower(err.Error())
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return plugin.Errorf(plugin.KindTargetUnreachable, "%s", msg)
	}
	if provider == ProviderRedfish {
		kind, hint := classifyRedfish(err, lower)
		return plugin.Errorf(kind, "%s%s", msg, hint)
	}
	switch {
	case containsAny(lower, authPhrases):
		return plugin.Errorf(plugin.KindPermanent, "%s (check the BMC credentials, %s and %s)", msg, ParamCipherSuite, ParamPrivilege)
	case containsAny(lower, unreachablePhrases):
		return plugin.Errorf(plugin.KindTargetUnreachable, "%s", msg)
	default:
		return plugin.Errorf(plugin.KindRetryable, "%s", msg)
	}
}

func containsAny(s string, phrases []string) bool {
	for _, ph := range phrases {
		if strings.Contains(s, ph) {
			return true
		}
	}
	return false
}

// parseState reads ipmitool's "Chassis Power is on|off" from anywhere in its output,
// ignoring case, spacing and other lines. Anything else is unknown: a state the driver
// did not read is never taken for off.
func parseState(raw string) plugin.PowerState {
	state := plugin.StateUnknown
	for _, line := range strings.Split(raw, "\n") {
		f := strings.Fields(strings.ToLower(line))
		if len(f) != 4 || f[0] != "chassis" || f[1] != "power" || f[2] != "is" {
			continue
		}
		var s plugin.PowerState
		switch f[3] {
		case "on":
			s = plugin.StateOn
		case "off":
			s = plugin.StateOff
		default:
			return plugin.StateUnknown
		}
		if state != plugin.StateUnknown && state != s {
			return plugin.StateUnknown // contradictory answers
		}
		state = s
	}
	return state
}
