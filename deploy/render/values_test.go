package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"
)

// valuesFile writes values as a file and reads it back as `helm -f` does.
func valuesFile(t *testing.T, values string) map[string]any {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := chartutil.ReadValuesFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLintStrict is `helm lint --strict` on the defaults, for the lowest Kubernetes
// version the chart claims.
func TestLintStrict(t *testing.T) {
	lint := action.NewLint()
	lint.Strict = true
	lint.Namespace = Namespace
	lint.KubeVersion = &chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"}
	res := lint.Run([]string{chartDir}, nil)
	for _, err := range res.Errors {
		t.Error(err)
	}
}

// TestKubeVersion: the chart claims the lowest version that serves everything it
// installs (the CRD's selectableFields are on by default from 1.31).
func TestKubeVersion(t *testing.T) {
	if _, err := RenderFor(chartDir, nil, "v1.31.0"); err != nil {
		t.Errorf("1.31.0: %v", err)
	}
	if _, err := RenderFor(chartDir, nil, "v1.30.14"); err == nil || !strings.Contains(err.Error(), "kubeVersion") {
		t.Errorf("1.30.14: err = %v, want the kubeVersion refusal", err)
	}
	// The node agent's admission policy reads the node a pod-bound token names (1.32):
	// on 1.31 the chart refuses it, naming the value, rather than install a policy that
	// cannot hold the agents to their own node.
	if _, err := RenderFor(chartDir, NodeAgentValues, "v1.31.5"); err == nil || !strings.Contains(err.Error(), "nodeAgent.enabled needs Kubernetes 1.32") {
		t.Errorf("node agent on 1.31.5: err = %v, want the refusal naming nodeAgent.enabled and 1.32", err)
	}
	if _, err := RenderFor(chartDir, NodeAgentValues, "v1.32.0"); err != nil {
		t.Errorf("node agent on 1.32.0: %v", err)
	}
}

// TestSchemaRejects: a value of the wrong type, outside its set, or misspelled where the
// chart would ignore it, is refused with its path before anything renders.
func TestSchemaRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		values string
		want   []string
	}{
		"replicas as a word":           {"controller: {replicas: two}", []string{"/controller/replicas", "want integer"}},
		"no replicas":                  {"controller: {replicas: 0}", []string{"/controller/replicas"}},
		"log format":                   {"controller: {logFormat: yaml}", []string{"/controller/logFormat", "'text', 'json'"}},
		"duration in words":            {"controller: {identityRenewInterval: 10 seconds}", []string{"/controller/identityRenewInterval"}},
		"port out of range":            {"controller: {metricsPort: 70000}", []string{"/controller/metricsPort"}},
		"misspelled key":               {"controller: {replica: 3}", []string{"/controller", "'replica' not allowed"}},
		"misspelled top key":           {"podDisruptionBuget: {enabled: false}", []string{"'podDisruptionBuget' not allowed"}},
		"anti-affinity":                {"controller: {podAntiAffinity: never}", []string{"/controller/podAntiAffinity"}},
		"pull policy":                  {"image: {pullPolicy: Sometimes}", []string{"/image/pullPolicy"}},
		"label not a string":           {"controller: {podLabels: {tier: 1}}", []string{"/controller/podLabels/tier", "want string"}},
		"create as a string":           {"serviceAccount: {create: \"no\"}", []string{"/serviceAccount/create", "want boolean"}},
		"extraArgs as a string":        {"controller: {extraArgs: --kube-api-qps=100}", []string{"/controller/extraArgs", "want array"}},
		"agent key misspelled":         {"agents: [{name: ipmi, binary: fence-agent-ipmi, target: {annotation: a}, secrets: x}]", []string{"/agents/0", "'secrets' not allowed"}},
		"agent param not string":       {"agents: [{name: ipmi, binary: fence-agent-ipmi, target: {annotation: a}, params: {cipherSuite: 3}}]", []string{"/agents/0/params/cipherSuite"}},
		"remote agent without TLS":     {"remoteAgents: [{name: ipmi-dc2, namespace: fencing-dc2, binary: fence-agent-ipmi, target: {annotation: a}}]", []string{"/remoteAgents/0", "serverTLSSecret"}},
		"config key the chart ignores": {"config: {histroy: {maxAge: 24h}}", []string{"/config", "'histroy' not allowed"}},
		"history age in days":          {"config: {history: {maxAge: 30d}}", []string{"/config/history/maxAge"}},
		"secret both ways":             {"agents: [{name: ipmi, binary: fence-agent-ipmi, target: {annotation: a}, secret: {template: x, annotation: y}}]", []string{"/agents/0/secret"}},
		"secret name as an object":     {"agents: [{name: ipmi, binary: fence-agent-ipmi, target: {annotation: a}, secret: {name: x}}]", []string{"/agents/0/secret"}},
		"target kind misspelled":       {"agents: [{name: ipmi, binary: fence-agent-ipmi, target: {templat: x}}]", []string{"/agents/0/target", "'templat' not allowed"}},
		"reader kind":                  {"metrics: {readers: [{kind: Robot, name: r}]}", []string{"/metrics/readers/0/kind"}},
		"requester kind":               {"userRoles: {requesters: [{kind: Role, name: r}]}", []string{"/userRoles/requesters/0/kind"}},
		"scrape interval":              {"metrics: {serviceMonitor: {interval: 30}}", []string{"/metrics/serviceMonitor/interval"}},
		"PDB minAvailable":             {"podDisruptionBudget: {minAvailable: half}", []string{"/podDisruptionBudget/minAvailable"}},
		"spread without key":           {"controller: {topologySpreadConstraints: [{maxSkew: 1, whenUnsatisfiable: DoNotSchedule}]}", []string{"/controller/topologySpreadConstraints/0", "topologyKey"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Render(chartDir, valuesFile(t, tc.values))
			if err == nil {
				t.Fatal("rendered; want a schema error")
			}
			for _, want := range append(tc.want, "schema") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}

// TestSchemaAccepts: what the tests, the docs and the real-node runs pass still renders;
// the passthroughs to the controller's configuration are left to the controller to judge.
func TestSchemaAccepts(t *testing.T) {
	for name, values := range map[string]string{
		// test/realnode/fence_e2e_test.go's remediationValues, with its upgrade's --set.
		"real-node policy": "image: {tag: 0.1.0-upgrade}\npolicies:\n- name: default\n  remediation: Direct\n  budget: {cooldown: 30s}\n  levels:\n  - agents: [ipmi]\n",
		"detection":        "config: {detection: {leaseStaleAfter: 20s, notReadyAfter: 20s}, leaderElection: {name: x, leaseDuration: 15s}}",
		"PDB percentage":   "podDisruptionBudget: {minAvailable: 50%}",
		"global":           "global: {imageRegistry: r}",
		"pinned digest":    "image: {digest: sha256:" + strings.Repeat("ab", 32) + "}",
		"fractional":       "controller: {identityRenewInterval: 1.5s, identityLeaseDuration: 1h30m}",
		"requesters":       "userRoles: {requesters: [{kind: Group, name: sre, apiGroup: rbac.authorization.k8s.io}]}",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Render(chartDir, valuesFile(t, values)); err != nil {
				t.Error(err)
			}
		})
	}
}

// controllerPod is the pod template of the controller's Deployment.
func controllerPod(t *testing.T, manifest []byte) (meta, spec map[string]any) {
	t.Helper()
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		var d struct {
			Kind     string         `json:"kind"`
			Metadata map[string]any `json:"metadata"`
			Spec     struct {
				Template struct {
					Metadata map[string]any `json:"metadata"`
					Spec     map[string]any `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind == "Deployment" && strings.HasSuffix(d.Metadata["name"].(string), "-controller") {
			return d.Spec.Template.Metadata, d.Spec.Template.Spec
		}
	}
	t.Fatal("no controller Deployment rendered")
	return nil, nil
}

// jsonOf is v as YAML flow text, for substring checks of nested values.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRenderPodConventions covers the pod values every chart is expected to have.
func TestRenderPodConventions(t *testing.T) {
	defaults, err := Render(chartDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, spec := controllerPod(t, defaults)
	if spec["priorityClassName"] != "system-cluster-critical" {
		t.Errorf("default priorityClassName %v, want system-cluster-critical", spec["priorityClassName"])
	}
	if _, ok := spec["topologySpreadConstraints"]; ok {
		t.Error("topologySpreadConstraints rendered by default")
	}

	out, err := Render(chartDir, valuesFile(t, `
controller:
  priorityClassName: ""
  podAnnotations: {example.com/team: fencing}
  podLabels: {tier: control}
  extraArgs: [--kube-api-qps=100, -v, "4"]
  extraEnv: [{name: GODEBUG, value: "x509sha1=0"}]
  extraVolumes: [{name: ca, configMap: {name: bmc-ca}}]
  extraVolumeMounts: [{name: ca, mountPath: /etc/bmc-ca, readOnly: true}]
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
  - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {own: selector}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	meta, spec := controllerPod(t, out)
	if _, ok := spec["priorityClassName"]; ok {
		t.Errorf("priorityClassName %v rendered, want none when empty", spec["priorityClassName"])
	}
	if a := meta["annotations"].(map[string]any); a["example.com/team"] != "fencing" || a["checksum/config"] == nil {
		t.Errorf("pod annotations %v, want example.com/team and the config checksum", a)
	}
	if l := meta["labels"].(map[string]any); l["tier"] != "control" || l["app.kubernetes.io/component"] != "controller" {
		t.Errorf("pod labels %v, want tier and the selector labels", l)
	}
	c := spec["containers"].([]any)[0].(map[string]any)
	args := c["args"].([]any)
	if n := len(args); n < 3 || !slices.Equal(args[n-3:], []any{"--kube-api-qps=100", "-v", "4"}) {
		t.Errorf("controller args %v, want the extra ones last", args)
	}
	for what, want := range map[string]string{
		"env":          "name: GODEBUG",
		"volumeMounts": "mountPath: /etc/bmc-ca",
	} {
		if got := jsonOf(t, c[what]); !strings.Contains(got, want) {
			t.Errorf("controller %s lacks %q:\n%s", what, want, got)
		}
	}
	if got := jsonOf(t, spec["volumes"]); !strings.Contains(got, "name: bmc-ca") || !strings.Contains(got, "name: config-template") {
		t.Errorf("volumes lack the extra one or the chart's own:\n%s", got)
	}
	spread := spec["topologySpreadConstraints"].([]any)
	if len(spread) != 2 {
		t.Fatalf("%d topologySpreadConstraints, want 2", len(spread))
	}
	if got := jsonOf(t, spread[0]); !strings.Contains(got, "app.kubernetes.io/instance: kubefence") {
		t.Errorf("a constraint without labelSelector did not get the selector labels:\n%s", got)
	}
	if got := jsonOf(t, spread[1]); !strings.Contains(got, "own: selector") || strings.Contains(got, "app.kubernetes.io") {
		t.Errorf("a constraint's own labelSelector was changed:\n%s", got)
	}
}

// TestRenderNames covers nameOverride, fullnameOverride and serviceAccount.
func TestRenderNames(t *testing.T) {
	for name, tc := range map[string]struct {
		values        string
		want, lacking []string
		err           string
	}{
		"nameOverride": {values: "nameOverride: fencer",
			want: []string{"name: kubefence-fencer-controller", "app.kubernetes.io/name: fencer", "name: kubefence-fencer-metrics"}},
		"fullnameOverride": {values: "fullnameOverride: fencer",
			want:    []string{"name: fencer-controller", "name: fencer-config", "system:serviceaccount:kubefence-system:fencer'"},
			lacking: []string{"name: kubefence-metrics", "name: kubefence-config"}},
		"ServiceAccount annotations": {values: "serviceAccount: {annotations: {example.com/role: fencer}}",
			want: []string{"\nkind: ServiceAccount", "example.com/role: fencer"}},
		"existing ServiceAccount": {values: "serviceAccount: {create: false, name: fencing-sa}",
			want:    []string{"serviceAccountName: fencing-sa", "name: fencing-sa\n    namespace: kubefence-system"},
			lacking: []string{"\nkind: ServiceAccount"}},
		"existing ServiceAccount unnamed": {values: "serviceAccount: {create: false}", err: "serviceAccount.name"},
		"config history, onTimeout and a target template": {values: "config: {history: {maxAge: 240h, keepPerNode: 5}}\n" +
			"agents: [{name: ipmi, binary: fence-agent-ipmi, onTimeout: 2m, target: {template: '{{ .Name }}-ipmi.dc1.example.com'}}]",
			want: []string{"keepPerNode: 5", "maxAge: 240h", "onTimeout: 2m", "template: '{{ .Name }}-ipmi.dc1.example.com'"}},
		"remote agent conventions": {values: "imagePullSecrets: [{name: regcred}]\nremoteAgents: [{name: ipmi-dc2, namespace: fencing-dc2, " +
			"binary: fence-agent-ipmi, target: {annotation: a}, serverTLSSecret: s, clientTLSSecret: c, replicas: 2, " +
			"podLabels: {tier: fencing}, podAnnotations: {example.com/scrape: \"no\"}, priorityClassName: fencing-agents, " +
			"topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}]}]",
			want: []string{"kind: PodDisruptionBudget\nmetadata:\n  name: kubefence-agent-ipmi-dc2\n  namespace: fencing-dc2",
				"        tier: fencing\n", "example.com/scrape: \"no\"", "priorityClassName: fencing-agents", "- name: regcred",
				"podAntiAffinity:\n          preferredDuringSchedulingIgnoredDuringExecution:\n            - weight: 100\n              podAffinityTerm:\n                topologyKey: kubernetes.io/hostname\n                labelSelector:\n                  matchLabels:\n                    app.kubernetes.io/instance: kubefence\n                    fencing.kubefence.io/agent: ipmi-dc2",
				// spread by the agent's own pods: a constraint without a selector spreads nothing
				"topologySpreadConstraints:\n        - labelSelector:\n            matchLabels:\n              app.kubernetes.io/instance: kubefence\n              fencing.kubefence.io/agent: ipmi-dc2\n          maxSkew: 1\n          topologyKey: topology.kubernetes.io/zone"}},
		"remote agent replicas without a PodDisruptionBudget": {values: "remoteAgents: [{name: ipmi-dc2, namespace: fencing-dc2, " +
			"binary: fence-agent-ipmi, target: {annotation: a}, serverTLSSecret: s, clientTLSSecret: c, replicas: 2, podDisruptionBudget: false}]",
			want:    []string{"name: kubefence-agent-ipmi-dc2\n  namespace: fencing-dc2"},
			lacking: []string{"kind: PodDisruptionBudget\nmetadata:\n  name: kubefence-agent-ipmi-dc2"}},
		"one remote agent replica, the controller's priority": {values: "remoteAgents: [{name: ipmi-dc2, namespace: fencing-dc2, " +
			"binary: fence-agent-ipmi, target: {annotation: a}, serverTLSSecret: s, clientTLSSecret: c}]\npodDisruptionBudget: {enabled: false}",
			want:    []string{"fencing.kubefence.io/agent: ipmi-dc2\n    spec:\n      automountServiceAccountToken: false\n      priorityClassName: system-cluster-critical"},
			lacking: []string{"kind: PodDisruptionBudget", "fencing.kubefence.io/agent: ipmi-dc2\n      affinity"}},
		// helm upgrade --reuse-values from a chart without the value renders with that
		// chart's values (null deletes the key, as its absence there would).
		"values of an older chart": {values: "serviceAccount: {create: null}",
			want: []string{"\nkind: ServiceAccount", "serviceAccountName: kubefence\n"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := Render(chartDir, valuesFile(t, tc.values))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			text := string(out)
			for _, want := range tc.want {
				if !strings.Contains(text, want) {
					t.Errorf("rendered chart lacks %q", want)
				}
			}
			for _, no := range tc.lacking {
				if strings.Contains(text, no) {
					t.Errorf("rendered chart has %q", no)
				}
			}
		})
	}
}

// TestExecAgentNeedsFenceAgents: fence-agent-exec set to run a ClusterLabs agent
// (/usr/sbin/fence_*) from the kubefence image, which carries none, is refused with the
// agent's path; a remote agent with an image of its own, or a script of the user's own,
// renders.
func TestExecAgentNeedsFenceAgents(t *testing.T) {
	local := map[string]any{"agents": []any{map[string]any{"name": "ipmilan", "binary": "fence-agent-exec",
		"params": map[string]any{"script": "/usr/sbin/fence_ipmilan", "target_key": "ip"}, "secret": "bmc", "target": map[string]any{"annotation": "a"}}}}
	if _, err := RenderFor(chartDir, local, "v1.31.0"); err == nil || !strings.Contains(err.Error(), "agents[0] (ipmilan): fence-agent-exec runs /usr/sbin/fence_ipmilan") {
		t.Errorf("a local exec agent running fence_ipmilan: err = %v, want the refusal naming agents[0]", err)
	}
	own := map[string]any{"agents": []any{map[string]any{"name": "mine", "binary": "fence-agent-exec",
		"params": map[string]any{"script": "/opt/fence/fence_mine", "target_key": "ip"}, "secret": "bmc", "target": map[string]any{"annotation": "a"}}}}
	if _, err := RenderFor(chartDir, own, "v1.31.0"); err != nil {
		t.Errorf("a local exec agent running a script of one's own: %v", err)
	}
	remote := func(image map[string]any) map[string]any {
		a := map[string]any{"name": "ipmilan-dc2", "namespace": "fencing-dc2", "binary": "fence-agent-exec", "port": 9443,
			"serverTLSSecret": "s", "clientTLSSecret": "c", "secret": "bmc-dc2",
			"params": map[string]any{"script": "/usr/sbin/fence_ipmilan", "target_key": "ip"}, "target": map[string]any{"annotation": "a"}}
		if image != nil {
			a["image"] = image
		}
		return map[string]any{"remoteAgents": []any{a}, "policies": []any{map[string]any{"name": "default", "levels": []any{map[string]any{"agents": []any{"ipmilan-dc2"}}}}}}
	}
	if _, err := RenderFor(chartDir, remote(nil), "v1.31.0"); err == nil || !strings.Contains(err.Error(), "remoteAgents[0] (ipmilan-dc2)") {
		t.Errorf("a remote exec agent on the kubefence image: err = %v, want the refusal naming remoteAgents[0]", err)
	}
	if _, err := RenderFor(chartDir, remote(map[string]any{"repository": "example.com/fence-agents"}), "v1.31.0"); err != nil {
		t.Errorf("a remote exec agent on an image of its own: %v", err)
	}
}
