package exec

import (
	"strings"
	"testing"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// deprecation is what fence_ipmilan (fence-agents 4.12.1 on Python 3.11) prints on stderr
// before anything else.
const deprecation = "/usr/sbin/fence_ipmilan:5: DeprecationWarning: 'pipes' is deprecated and slated for removal in Python 3.13\n  from pipes import quote\n"

// TestClassify maps the real outputs of fence_ipmilan and fence_redfish (recorded against
// ipmi_sim and local servers: every failure exits 1, only the text differs) to kinds and
// causes, and keeps a readable message.
func TestClassify(t *testing.T) {
	for name, tc := range map[string]struct {
		output  string
		kind    plugin.ErrorKind
		cause   string
		message string // the cleaned output must equal it
	}{
		"fence_ipmilan, wrong password": {
			output: deprecation + "2026-11-23 17:41:02,511 ERROR: Failed: Unable to obtain correct plug status or plug is not available\n\n\n",
			kind:   plugin.KindPermanent, cause: "wrong credentials or unknown plug",
			message: "Failed: Unable to obtain correct plug status or plug is not available",
		},
		"fence_ipmilan --verbose, wrong password": {
			output: deprecation + "2026-11-23 17:41:02,500 INFO: Executing: /usr/bin/ipmitool -I lanplus -H 127.0.0.1 -p 47935 -U admin -P [set] -C 3 -L ADMINISTRATOR -N 2 chassis power status\n\n" +
				"2026-11-23 17:41:02,510 DEBUG: 1  Error: Unable to establish IPMI v2 / RMCP+ session\n \n" +
				"2026-11-23 17:41:02,511 ERROR: Failed: Unable to obtain correct plug status or plug is not available\n\n\n",
			kind: plugin.KindPermanent, cause: "wrong credentials",
		},
		"fence_ipmilan, unreachable BMC": {
			output: deprecation + "2026-11-23 17:41:22,600 ERROR: Connection timed out\n\n\n",
			kind:   plugin.KindTargetUnreachable, cause: "did not answer in time", message: "Connection timed out",
		},
		"fence_ipmilan, power never goes off": {
			output: deprecation + "2026-11-23 17:42:02,100 ERROR: Failed: Timed out waiting to power OFF\n\n\n",
			kind:   plugin.KindNotVerified, cause: "did not read back off",
		},
		"fence_redfish, connection refused": {
			output: "2026-11-23 17:43:00,001 ERROR: Failed: send_get_request: HTTPSConnectionPool(host='127.0.0.1', port=34013): Max retries exceeded with url: /redfish/v1 (Caused by NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7fa290ef63d0>: Failed to establish a new connection: [Errno 111] Connection refused'))\n\n" +
				"2026-11-23 17:43:00,002 ERROR: Please use '-h' for usage\n\n",
			kind: plugin.KindTargetUnreachable, cause: "connection refused",
		},
		"fence_redfish, plain HTTP where HTTPS is expected": {
			output: "2026-11-23 17:43:10,001 ERROR: Failed: send_get_request: HTTPSConnectionPool(host='127.0.0.1', port=55203): Max retries exceeded with url: /redfish/v1 (Caused by SSLError(SSLError(1, '[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:992)')))\n\n" +
				"2026-11-23 17:43:10,002 ERROR: Please use '-h' for usage\n",
			kind: plugin.KindPermanent, cause: "plain HTTP",
		},
		"login refused": {
			output: "2026-11-23 17:44:00,000 ERROR: Unable to connect/login to fencing device\n",
			kind:   plugin.KindPermanent, cause: "login refused",
		},
		"missing password": {
			output: "2026-11-23 17:44:00,000 ERROR: Failed: You have to set login password\n",
			kind:   plugin.KindPermanent, cause: "no password",
		},
		"bad arguments": {
			output: "2026-11-23 17:44:00,000 ERROR: Failed: unrecognized option '--bogus'\n2026-11-23 17:44:00,000 ERROR: Please use '-h' for usage\n",
			kind:   plugin.KindPermanent, cause: "refused its arguments",
		},
		"an unknown text stays retryable": {
			output: "device busy, try later\n", kind: plugin.KindRetryable, message: "device busy, try later",
		},
	} {
		t.Run(name, func(t *testing.T) {
			kind, cause := classify(tc.output)
			if kind != tc.kind || !strings.Contains(cause, tc.cause) {
				t.Errorf("classify = %s %q, want %s containing %q", kind, cause, tc.kind, tc.cause)
			}
			msg := clean(tc.output)
			if strings.Contains(msg, "DeprecationWarning") || strings.Contains(msg, "from pipes") || strings.Contains(msg, "2026-11-23") {
				t.Errorf("clean kept noise: %q", msg)
			}
			if tc.message != "" && msg != tc.message {
				t.Errorf("clean = %q, want %q", msg, tc.message)
			}
		})
	}
}
