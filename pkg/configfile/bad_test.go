package configfile

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// valid is a versioned configuration that passes; each bad case changes one thing.
const valid = `apiVersion: config.kubefence.io/v1alpha1
kind: FenceControllerConfiguration
leaderElection:
  namespace: kubefence-system
  name: kubefence-controller
agents:
- name: ipmi
  sha256: "0000000000000000000000000000000000000000000000000000000000000000"
  target: {annotation: fencing.kubefence.io/bmc}
  secretRef: {namespace: kubefence-system, name: bmc-credentials}
  timeout: 30s
- name: remote
  address: bmc-agent.dc1.example.com:9443
  tls: {certFile: /tls/tls.crt, keyFile: /tls/tls.key, caFile: /tls/ca.crt}
  target: {label: fencing.kubefence.io/bmc}
policies:
- name: default
  action: "Off"
  levels:
  - agents: [ipmi]
    mode: all
    timeout: 60s
    retries: 1
  budget: {maxConcurrent: 10, maxUnhealthy: 40%, cooldown: 10m}
`

// badConfigs are the configurations that must be refused, each with the exact error.
// A case is the valid file with old replaced by new (the first occurrence), or, when
// old is empty, new as the whole file.
var badConfigs = map[string]struct {
	old, new, want string
}{
	"policy name of spaces": {"- name: default", "- name: '   '",
		`config: policies[0].name: Invalid value: "   ": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`},
	"policy name with a newline": {"- name: default", `- name: "de\nfault"`,
		`config: policies[0].name: Invalid value: "de\nfault": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`},
	"address without host": {"bmc-agent.dc1.example.com:9443", `":80"`,
		`config: agents[1].address: Invalid value: ":80": the host is missing (want host:port)`},
	"address without port": {"bmc-agent.dc1.example.com:9443", `"host:"`,
		`config: agents[1].address: Invalid value: "host:": the port must be a number from 1 to 65535`},
	"address port too high": {"bmc-agent.dc1.example.com:9443", "host:99999",
		`config: agents[1].address: Invalid value: "host:99999": the port must be a number from 1 to 65535`},
	"address port zero": {"bmc-agent.dc1.example.com:9443", "host:0",
		`config: agents[1].address: Invalid value: "host:0": the port must be a number from 1 to 65535`},
	"address host with spaces": {"bmc-agent.dc1.example.com:9443", "bad host name:9443",
		`config: agents[1].address: Invalid value: "bad host name:9443": the host is neither an IP address nor a DNS name`},
	"annotation key invalid": {"annotation: fencing.kubefence.io/bmc", "annotation: 'not a key!'",
		`config: agents[0].target.annotation: Invalid value: "not a key!": not a valid label or annotation key: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`},
	"label key invalid": {"label: fencing.kubefence.io/bmc", "label: 'a/b/c'",
		`config: agents[1].target.label: Invalid value: "a/b/c": not a valid label or annotation key: a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')`},
	"lease name invalid": {"name: kubefence-controller", "name: Kubefence_Controller",
		`config: leaderElection.name: Invalid value: "Kubefence_Controller": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
	"lease namespace invalid": {"namespace: kubefence-system\n  name", "namespace: kube.fence\n  name",
		`config: leaderElection.namespace: Invalid value: "kube.fence": must not contain dots`},
	"secret name invalid": {"name: bmc-credentials", "name: BMC_creds",
		`config: agents[0].secretRef.name: Invalid value: "BMC_creds": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
	"secret namespace invalid": {"{namespace: kubefence-system, name: bmc", "{namespace: 'Kube Fence', name: bmc",
		`config: agents[0].secretRef.namespace: Invalid value: "Kube Fence": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`},
	"292 years": {"timeout: 30s", "timeout: 2562047h",
		`config: agents[0].timeout: Invalid value: "2562047h0m0s": must be from 100ms to 1h0m0s`},
	"agent timeout 1ns": {"timeout: 30s", "timeout: 1ns",
		`config: agents[0].timeout: Invalid value: "1ns": must be from 100ms to 1h0m0s`},
	"onTimeout 30ns": {"timeout: 30s", "timeout: 30s\n  onTimeout: 30ns",
		`config: agents[0].onTimeout: Invalid value: "30ns": must be from 100ms to 1h0m0s`},
	"offDelay 11m": {"timeout: 30s", "timeout: 30s\n  offDelay: 11m",
		`config: agents[0].offDelay: Invalid value: "11m0s": must be from 0s to 10m0s`},
	"a million retries": {"retries: 1", "retries: 1000000",
		"config: policies[0].levels[0].retries: Invalid value: 1000000: must be from 0 to 20"},
	"maxUnhealthy 150%": {"maxUnhealthy: 40%", "maxUnhealthy: 150%",
		`config: policies[0].budget.maxUnhealthy: Invalid value: "150%": must be a percentage from 0% to 100%, or a count`},
	"maxUnhealthy -1": {"maxUnhealthy: 40%", "maxUnhealthy: -1",
		"config: policies[0].budget.maxUnhealthy: Invalid value: -1: must be a count of 0 or more, or a percentage"},
	"maxUnhealthy -10%": {"maxUnhealthy: 40%", "maxUnhealthy: -10%",
		`config: policies[0].budget.maxUnhealthy: Invalid value: "-10%": must be a percentage from 0% to 100%, or a count`},
	"maxUnhealthy a word": {"maxUnhealthy: 40%", "maxUnhealthy: most",
		`config: policies[0].budget.maxUnhealthy: Invalid value: "most": must be a whole number or a percentage such as "40%"`},
	"explicit cooldown 0s": {"cooldown: 10m", "cooldown: 0s",
		`config: policies[0].budget.cooldown: Invalid value: "0s": an explicit zero would be replaced by the default; leave the field out, or set the duration you mean`},
	"explicit maxConcurrent 0": {"maxConcurrent: 10", "maxConcurrent: 0",
		"config: policies[0].budget.maxConcurrent: Invalid value: 0: an explicit 0 would be replaced by the default (10); leave the field out, or set the value you mean"},
	"maxConcurrent negative": {"maxConcurrent: 10", "maxConcurrent: -3",
		"config: policies[0].budget.maxConcurrent: Invalid value: -3: must be from 1 to 10000"},
	"second YAML document": {"", valid + "---\n" + valid + "dryRun: true\n",
		"config: the file holds 2 YAML documents; a configuration is exactly one (remove the '---' separators)"},
	"duration in words": {"cooldown: 10m", "cooldown: 10 minutes",
		`config: policies[0].budget.cooldown: Invalid value: "10 minutes": not a duration: use a number and a unit, such as "90s", "10m" or "1h30m" (units ns, us, ms, s, m, h)`},
	"duration as a number": {"timeout: 60s", "timeout: 60",
		`config: policies[0].levels[0].timeout: Invalid value: 60: must be a duration with its unit, such as "90s", "10m" or "1h30m" ("0s" for zero)`},
	"retries as a word": {"retries: 1", "retries: three",
		`config: policies[0].levels[0].retries: Invalid value: "three": must be a whole number`},
	"retries as a fraction": {"retries: 1", "retries: 1.5",
		"config: policies[0].levels[0].retries: Invalid value: 1.5: must be a whole number"},
	"action Off unquoted": {`action: "Off"`, "action: Off",
		"config: policies[0].action: Invalid value: false: must be a string: YAML reads unquoted yes, no, on, off, true and false as booleans; quote the value"},
	"mode yes": {"mode: all", "mode: yes",
		"config: policies[0].levels[0].mode: Invalid value: true: must be a string: YAML reads unquoted yes, no, on, off, true and false as booleans; quote the value"},
	"remediation no": {`action: "Off"`, `action: "Off"` + "\n  remediation: no",
		"config: policies[0].remediation: Invalid value: false: must be a string: YAML reads unquoted yes, no, on, off, true and false as booleans; quote the value"},
	"action unknown": {`action: "Off"`, `action: "Halt"`,
		`config: policies[0].action: Unsupported value: "Halt": supported values: "Off", "Reboot"`},
	"mode unknown": {"mode: all", "mode: most",
		`config: policies[0].levels[0].mode: Unsupported value: "most": supported values: "all", "any"`},
	"huge value quoted short": {"- name: default", "- name: " + strings.Repeat("x", 10<<20),
		`config: policies[0].name: Invalid value: "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (10485760 bytes)": must be no more than 63 characters`},
	"unknown top-level field": {"agents:", "agent: []\nagents:",
		"config: agent: Forbidden: unknown field; the fields here are agents, apiVersion, detection, dryRun, externalRemediation, heartbeats, history, kind, leaderElection, paused, pluginDir, policies, watchdog"},
	"field with the wrong case": {"maxConcurrent: 10", "maxconcurrent: 10",
		`config: policies[0].budget.maxconcurrent: Forbidden: unknown field; did you mean "maxConcurrent"?`},
	"wrong apiVersion": {"config.kubefence.io/v1alpha1", "kubefence.io/v1",
		`config: apiVersion: Unsupported value: "kubefence.io/v1": supported values: "config.kubefence.io/v1alpha1"`},
	"wrong kind": {"kind: FenceControllerConfiguration", "kind: Config",
		`config: kind: Unsupported value: "Config": supported values: "FenceControllerConfiguration"`},
	"paused as a string": {"policies:", "paused: 'yes'\npolicies:",
		`config: paused: Invalid value: "yes": must be true or false`},
	"level agents not a list": {"- agents: [ipmi]", "- agents: ipmi",
		`config: policies[0].levels[0].agents: Invalid value: "ipmi": must be a list`},
	"no policies": {"", strings.Split(valid, "policies:")[0],
		"config: policies: Required value: at least one policy"},
	"level names an unknown agent": {"agents: [ipmi]", "agents: [impi]",
		`config: policies[0].levels[0].agents[0]: Not found: "impi"`},
	"remote agent with a sha256": {"address: bmc-agent", "sha256: \"0000000000000000000000000000000000000000000000000000000000000000\"\n  address: bmc-agent",
		"config: agents[1].address: Forbidden: a remote agent has no binary or sha256"},
	"renewDeadline over leaseDuration": {"name: kubefence-controller", "name: kubefence-controller\n  leaseDuration: 10s\n  renewDeadline: 15s",
		`config: leaderElection.renewDeadline: Invalid value: "15s": must be less than leaseDuration`},
	"flapThreshold 1000": {"leaderElection:", "detection: {flapThreshold: 1000}\nleaderElection:",
		"config: detection.flapThreshold: Invalid value: 1000: must be from 2 to 100"},
	"burst without a rate": {"cooldown: 10m", "cooldown: 10m, rateLimit: {burst: 3}",
		"config: policies[0].budget.rateLimit.burst: Invalid value: 3: needs fencesPerMinute"},
	"fencesPerMinute 5000": {"cooldown: 10m", "cooldown: 10m, rateLimit: {fencesPerMinute: 5000}",
		"config: [policies[0].budget.rateLimit.fencesPerMinute: Invalid value: 5000: must be from 0 to 1000, policies[0].budget.rateLimit.burst: Invalid value: 5000: must be from 0 to 1000]"},
	"expectedRenewInterval negative": {"leaderElection:", "detection: {expectedRenewInterval: -1s}\nleaderElection:",
		`config: detection.expectedRenewInterval: Invalid value: "-1s": must be from 100ms to 1h0m0s`},
	"level timeout 2h": {"timeout: 60s", "timeout: 2h",
		`config: policies[0].levels[0].timeout: Invalid value: "2h0m0s": must be from 100ms to 1h0m0s`},
	"minWait 2h": {`action: "Off"`, `action: "Off"` + "\n  minWait: 2h",
		`config: policies[0].minWait: Invalid value: "2h0m0s": must be from 100ms to 1h0m0s`},
	"maintenance window of 500ms": {`action: "Off"`, `action: "Off"` + "\n  maintenance: {maxWindow: 500ms}",
		`config: policies[0].maintenance.maxWindow: Invalid value: "500ms": must be from 1s to 168h0m0s`},
	"maintenance cordoned Sometimes": {`action: "Off"`, `action: "Off"` + "\n  maintenance: {cordoned: Sometimes}",
		`config: policies[0].maintenance.cordoned: Unsupported value: "Sometimes": supported values: "WhenDrained", "Always", "Never"`},
	"bad selector operator": {`action: "Off"`, `action: "Off"` + "\n  nodeSelector: {matchExpressions: [{key: a, operator: Like}]}",
		`config: policies[0].nodeSelector: Invalid value: {"matchExpressions":[{"key":"a","operator":"Like"}]}: "Like" is not a valid label selector operator`},
	"agent without a target": {"  target: {annotation: fencing.kubefence.io/bmc}\n", "",
		"config: agents[0].target: Required value: one of annotation, label, providerID or template: where the node's target is found"},
	"target template that does not parse": {"  target: {annotation: fencing.kubefence.io/bmc}\n", "  target: {template: '{{ .Name -bmc'}\n",
		`config: agents[0].target.template: Invalid value: "{{ .Name -bmc": template: target:1: bad number syntax: "-b"`},
	"target template with an unknown function": {"  target: {annotation: fencing.kubefence.io/bmc}\n", "  target: {template: '{{ upper .Name }}'}\n",
		`config: agents[0].target.template: Invalid value: "{{ upper .Name }}": template: target:1: function "upper" not defined`},
	"target template and annotation": {"  target: {annotation: fencing.kubefence.io/bmc}\n", "  target: {annotation: fencing.kubefence.io/bmc, template: '{{ .Name }}'}\n",
		"config: agents[0].target: Invalid value: 2: exactly one of annotation, label, providerID, template must be set"},
	"sha256 not hex": {`sha256: "0000`, `sha256: "zzzz`,
		`config: agents[0].sha256: Invalid value: "zzzz000000000000000000000000000000000000000000000000000000000000": must be 64 lower-case hex digits (or set address for a remote agent)`},
	"duration a bare zero": {"leaderElection:", "detection: {expectedRenewInterval: 0}\nleaderElection:",
		`config: detection.expectedRenewInterval: Invalid value: 0: must be a duration with its unit, such as "90s", "10m" or "1h30m" ("0s" for zero)`},
	"param value not a string, never quoted": {"timeout: 30s", "timeout: 30s\n  params: {password: 123456}",
		`config: agents[0].params.password: Invalid value: "(not shown)": must be a string; quote it`},
	"agent without a name": {"- name: ipmi\n  sha256", "- sha256",
		`config: [agents[0].name: Required value: the name policies give this agent, policies[0].levels[0].agents[0]: Not found: "ipmi"]`},
	"policy without a name": {"- name: default\n  action", "- action",
		"config: policies[0].name: Required value"},
	"level without agents": {"- agents: [ipmi]\n", "- agents: []\n",
		"config: policies[0].levels[0].agents: Required value: at least one agent, or watchdog: true"},
	"watchdog level with agents": {"  - agents: [ipmi]\n", "  - agents: [ipmi]\n    watchdog: true\n",
		`config: policies[0].levels[0].agents: Invalid value: ["ipmi"]: a watchdog level calls no agent: put the agents in a level of their own`},
	"agent named watchdog": {"- name: remote", "- name: watchdog",
		`config: agents[1].name: Invalid value: "watchdog": reserved: the attempts of a watchdog level carry it`},
	"watchdog level too short": {"  - agents: [ipmi]\n    mode: all\n    timeout: 60s", "  - watchdog: true\n    timeout: 10s",
		`config: policies[0].levels[0].timeout: Invalid value: "10s": a watchdog level waits isolation (10s) + 2 × the watchdog's timeout: its timeout must be longer`},
	"networkFence with a binary": {"- name: remote", "- name: ceph\n  networkFence: {driver: rbd.csi.ceph.com}\n  sha256: \"0000000000000000000000000000000000000000000000000000000000000000\"\n- name: remote",
		`config: agents[1].sha256: Forbidden: not with networkFence: the controller creates the NetworkFence itself`},
	"networkFence with secretRef": {"- name: remote", "- name: ceph\n  networkFence: {driver: rbd.csi.ceph.com}\n  secretRef: {namespace: a, name: b}\n- name: remote",
		`config: agents[1].secretRef: Forbidden: not with networkFence: the controller creates the NetworkFence itself`},
	"networkFence without a driver": {"- name: remote", "- name: ceph\n  networkFence: {parameters: {clusterID: c}}\n- name: remote",
		`config: agents[1].networkFence.driver: Required value: the CSI driver that fences (or className, a NetworkFenceClass)`},
	"networkFence with driver and class": {"- name: remote", "- name: ceph\n  networkFence: {driver: rbd.csi.ceph.com, className: ceph}\n- name: remote",
		`config: agents[1].networkFence.className: Invalid value: "ceph": exactly one of driver and className`},
	"networkFence class with parameters": {"- name: remote", "- name: ceph\n  networkFence: {className: ceph, parameters: {clusterID: c}}\n- name: remote",
		`config: agents[1].networkFence.parameters: Forbidden: with className the NetworkFenceClass holds the parameters and the Secret`},
	"networkFence secret without a name": {"- name: remote", "- name: ceph\n  networkFence: {driver: rbd.csi.ceph.com, secret: {namespace: rook-ceph}}\n- name: remote",
		`config: agents[1].networkFence.secret: Required value: namespace and name`},
	"networkFence address type": {"- name: remote", "- name: ceph\n  networkFence: {driver: rbd.csi.ceph.com, addressTypes: [Hostname]}\n- name: remote",
		`config: agents[1].networkFence.addressTypes[0]: Unsupported value: "Hostname": supported values: "InternalIP", "ExternalIP"`},
	"networkFence target from providerID": {"- name: remote", "- name: ceph\n  networkFence: {driver: rbd.csi.ceph.com}\n  target: {providerID: true}\n- name: remote",
		`config: agents[1].target.providerID: Forbidden: not with networkFence: the controller creates the NetworkFence itself`},
	"heartbeats without a key": {"policies:", "heartbeats: {probeInterval: 1s}\npolicies:",
		`config: heartbeats.keyFile: Required value: the agents' peer key: an answer that keeps a node alive must come from an agent`},
	"heartbeats bind address without a host": {"policies:", "heartbeats: {keyFile: /peer/key, bindAddress: ':7947'}\npolicies:",
		`config: heartbeats.bindAddress: Invalid value: ":7947": the host is missing (want host:port)`},
	"heartbeats probe interval too short": {"policies:", "heartbeats: {keyFile: /peer/key, probeInterval: 10ms}\npolicies:",
		`config: heartbeats.probeInterval: Invalid value: "10ms": must be from 100ms to 10s`},
	"heartbeats kubelet timeout too long": {"policies:", "heartbeats: {keyFile: /peer/key, kubeletTimeout: 1m}\npolicies:",
		`config: heartbeats.kubeletTimeout: Invalid value: "1m0s": must be from 100ms to 10s`},
	"heartbeats kubelet checks too rare": {"policies:", "heartbeats: {keyFile: /peer/key, kubeletCheckInterval: 2h}\npolicies:",
		`config: heartbeats.kubeletCheckInterval: Invalid value: "2h0m0s": must be from 1s to 1h0m0s`},
	"heartbeats leave grace too short": {"policies:", "heartbeats: {keyFile: /peer/key, leaveGrace: 100ms}\npolicies:",
		`config: heartbeats.leaveGrace: Invalid value: "100ms": must be from 1s to 1h0m0s`},
	"watchdog isolation too long": {"policies:", "watchdog: {isolation: 11m}\npolicies:",
		`config: watchdog.isolation: Invalid value: "11m0s": must be from 1s to 10m0s`},
	"watchdog namespace invalid": {"policies:", "watchdog: {namespace: Nodes}\npolicies:",
		`config: watchdog.namespace: Invalid value: "Nodes": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`},
	"eleven levels": {"  - agents: [ipmi]\n", strings.Repeat("  - agents: [ipmi]\n", 11),
		"config: policies[0].levels: Too many: 11: must have at most 10 items"},
	"not a mapping": {"", "- just\n- a list\n",
		"config: the file must be a YAML mapping of fields (apiVersion, kind, agents, policies, ...), not a list"},
}

func TestBadConfigs(t *testing.T) {
	if _, err := Parse([]byte(valid)); err != nil {
		t.Fatalf("the valid base is refused: %v", err)
	}
	gen := os.Getenv("KUBEFENCE_GEN") != ""
	for name, tc := range badConfigs {
		t.Run(name, func(t *testing.T) {
			doc := tc.new
			if tc.old != "" {
				if !strings.Contains(valid, tc.old) {
					t.Fatalf("%q is not in the valid base", tc.old)
				}
				doc = strings.Replace(valid, tc.old, tc.new, 1)
			}
			_, err := Parse([]byte(doc))
			if err == nil {
				t.Fatalf("accepted:\n%s", doc)
			}
			if gen {
				t.Logf("GOT %q: %q", name, err.Error())
				return
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n%s\nwant:\n%s", err, tc.want)
			}
		})
	}
}

// TestGettingStartedConfig: the configuration docs/getting-started.md shows passes as
// written, and the mistakes it shows give the error it prints.
func TestGettingStartedConfig(t *testing.T) {
	doc, err := os.ReadFile("../../docs/getting-started.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- checked by TestGettingStartedConfig")
	if !ok {
		t.Fatal("docs/getting-started.md lost its checked configuration")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	cfgText, rest, _ := strings.Cut(rest, "```")
	if _, err := Parse([]byte(cfgText)); err != nil {
		t.Fatalf("the documented configuration is refused: %v", err)
	}
	_, rest, _ = strings.Cut(rest, "```\n")
	shown, _, _ := strings.Cut(rest, "\n```")
	bad := strings.Replace(strings.Replace(cfgText, "timeout: 60s", "timeout: 10 minutes", 1), `action: "Off"`, "action: Off", 1)
	if _, err := Parse([]byte(bad)); err == nil || err.Error() != shown {
		t.Errorf("the documented mistakes give\n%v\nthe docs show\n%s", err, shown)
	}
}

// TestEveryFieldsWrongType: every field of a full configuration, given a value of the
// wrong type, is refused with an error that names its full path, list index included.
func TestEveryFieldsWrongType(t *testing.T) {
	full := valid + "detection: {leaseStaleAfter: 30s, notReadyAfter: 30s, expectedRenewInterval: 10s, flapWindow: 10m, flapThreshold: 3}\n" +
		"paused: false\ndryRun: false\npluginDir: /usr/libexec/kubefence/agents\n"
	full = strings.Replace(full, "  timeout: 30s\n", "  timeout: 30s\n  onTimeout: 40s\n  binary: ipmi\n  params: {cipherSuite: '3'}\n", 1)
	full = strings.Replace(full, "    retries: 1\n", "    retries: 1\n    backoff: 1s\n", 1)
	full = strings.Replace(full, "  budget: {", "  remediation: Both\n  paused: false\n  dryRun: false\n  excludeLabel: example.com/skip\n"+
		"  skipIfNothingToRelease: false\n  honorTolerations: true\n  honorDisruptionBudgets: true\n  minWait: 5s\n"+
		"  maintenance: {maxWindow: 2h, cordoned: Always}\n"+
		"  nodeSelector: {matchLabels: {zone: a}}\n  budget: {perZone: true, controlPlaneOneAtATime: true, rateLimit: {fencesPerMinute: 2, burst: 2}, ", 1)
	js, err := yaml.YAMLToJSON([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(js, &root); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(js); err != nil {
		t.Fatalf("the full configuration is refused: %v", err)
	}
	leaves := 0
	var walk func(path string, v any, set func(any))
	walk = func(path string, v any, set func(any)) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				p := k
				if path != "" {
					p = path + "." + k
				}
				walk(p, child, func(n any) { v[k] = n })
			}
		case []any:
			for i, child := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), child, func(n any) { v[i] = n })
			}
		default:
			if strings.Contains(path, ".matchLabels.") {
				path = path[:strings.LastIndex(path, ".")] + "[" + path[strings.LastIndex(path, ".")+1:] + "]"
			}
			leaves++
			set([]any{"wrong", "type"})
			out, _ := json.Marshal(root)
			set(v)
			_, err := Parse(out)
			if err == nil || !strings.Contains(err.Error(), path+":") {
				t.Errorf("%s given a list: %v; want an error naming %s", path, err, path)
			}
		}
	}
	walk("", root, nil)
	if leaves < 40 {
		t.Errorf("only %d fields were tried", leaves)
	}
	t.Logf("%d fields, each refused with its path when given a value of the wrong type", leaves)
}
