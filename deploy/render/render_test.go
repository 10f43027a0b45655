package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "../helm/kubefence"
	manifests = "../manifests/kubefence.yaml"
	// agentManifests holds the node agent's objects (RenderNodeAgent).
	agentManifests = "../manifests/node-agent.yaml"
	crdSource      = "../../pkg/apis/fencing/v1alpha1/crd"
)

// TestManifestsUpToDate fails when deploy/manifests was not regenerated after a chart
// change (or a release, whose image values deploy/release-values.yaml holds).
func TestManifestsUpToDate(t *testing.T) {
	kf, agent, err := RenderManifests(chartDir, "../"+ReleaseValuesFile)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{manifests: kf, agentManifests: agent} {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run make manifests)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run make manifests", path)
		}
	}
}

// TestRenderNodeAgent: the node agent is off by default, and its own file holds all of
// its objects and nothing else.
func TestRenderNodeAgent(t *testing.T) {
	def, err := Render(chartDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(def, []byte("node-agent")) {
		t.Error("the default manifests contain the node agent, which is off by default")
	}
	out, err := RenderNodeAgent(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, doc := range bytes.Split(out, []byte("\n---\n"))[1:] {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(obj.Metadata.Name, "node-agent") {
			t.Errorf("%s %s in the node agent's file", obj.Kind, obj.Metadata.Name)
		}
		kinds = append(kinds, obj.Kind)
	}
	want := "ServiceAccount ClusterRole ClusterRoleBinding Role RoleBinding DaemonSet ValidatingAdmissionPolicy ValidatingAdmissionPolicyBinding"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("node agent objects: %s, want %s", got, want)
	}
}

// TestChartCRDsMatchSource fails when the chart's CRD template differs from the generated
// CRD in pkg/apis (run deploy/helm/sync-crds.sh, which make manifests does): rendered, it
// is the source plus the chart's labels and, with crds.keep, helm.sh/resource-policy: keep.
// crds.install=false renders no CRD.
func TestChartCRDsMatchSource(t *testing.T) {
	src, err := filepath.Glob(filepath.Join(crdSource, "*.yaml"))
	if err != nil || len(src) == 0 {
		t.Fatalf("no CRDs in %s: %v", crdSource, err)
	}
	for name, tc := range map[string]struct {
		values map[string]any
		crds   int
		keep   bool
	}{
		"defaults":   {nil, len(src), true},
		"not kept":   {map[string]any{"crds": map[string]any{"keep": false}}, len(src), false},
		"not in use": {map[string]any{"crds": map[string]any{"install": false}}, 0, false},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := Render(chartDir, tc.values)
			if err != nil {
				t.Fatal(err)
			}
			rendered := decode(t, out)["CustomResourceDefinition"]
			if len(rendered) != tc.crds {
				t.Fatalf("%d CRDs rendered, want %d", len(rendered), tc.crds)
			}
			for i, got := range rendered {
				var want object
				b, err := os.ReadFile(src[i])
				if err != nil {
					t.Fatal(err)
				}
				if err := yaml.Unmarshal(b, &want); err != nil {
					t.Fatal(err)
				}
				if !equality(got.Spec, want.Spec) || got.Metadata["name"] != want.Metadata["name"] {
					t.Errorf("rendered CRD %v differs from %s: run make manifests", got.Metadata["name"], src[i])
				}
				ann, _ := got.Metadata["annotations"].(map[string]any)
				if kept := ann["helm.sh/resource-policy"] == "keep"; kept != tc.keep {
					t.Errorf("CRD %v kept on uninstall: %v, want %v", got.Metadata["name"], kept, tc.keep)
				}
				if labels, _ := got.Metadata["labels"].(map[string]any); labels["app.kubernetes.io/managed-by"] != "Helm" {
					t.Errorf("CRD %v labels %v, want the chart's", got.Metadata["name"], labels)
				}
			}
		})
	}
}

// equality compares two decoded YAML values.
func equality(a, b any) bool {
	ja, erra := yaml.Marshal(a)
	jb, errb := yaml.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

// allOn turns on every optional part of the chart, with two datacenters served remotely.
func allOn() map[string]any {
	remote := func(dc string) map[string]any {
		return map[string]any{
			"name": "ipmi-" + dc, "namespace": "fencing-" + dc, "binary": "fence-agent-ipmi", "port": 9443,
			"nodeSelector":    map[string]any{"topology.kubernetes.io/zone": dc},
			"serverTLSSecret": "ipmi-" + dc + "-server", "clientTLSSecret": "ipmi-" + dc + "-client",
			"secret": "bmc-" + dc, "target": map[string]any{"annotation": "fencing.kubefence.io/ipmi-address"},
		}
	}
	policy := func(dc string) map[string]any {
		return map[string]any{
			"name":         dc,
			"nodeSelector": map[string]any{"matchLabels": map[string]any{"topology.kubernetes.io/zone": dc}},
			"levels":       []any{map[string]any{"agents": []any{"ipmi-" + dc}}},
		}
	}
	return map[string]any{
		"controller":          map[string]any{"leaderPodCondition": true},
		"podDisruptionBudget": map[string]any{"enabled": false},
		"remoteAgents":        []any{remote("dc2"), remote("dc3")},
		"policies":            []any{policy("dc2"), policy("dc3"), map[string]any{"name": "default", "levels": []any{map[string]any{"agents": []any{"ipmi"}}}}},
		"metrics": map[string]any{
			"tlsSecret":      "kubefence-metrics-tls",
			"readers":        []any{map[string]any{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}},
			"serviceMonitor": map[string]any{"enabled": true},
			"prometheusRule": map[string]any{"enabled": true},
		},
		"grafanaDashboard": map[string]any{"enabled": true},
		"nodeAgent":        map[string]any{"enabled": true, "extraArgs": []any{"--kube-api-qps=2"}, "nodeSelector": map[string]any{"kubernetes.io/os": "linux"}},
		"userRoles": map[string]any{
			"requesters": []any{map[string]any{"kind": "Group", "name": "sre", "apiGroup": "rbac.authorization.k8s.io"}},
			"onCall":     []any{map[string]any{"kind": "Group", "name": "oncall", "apiGroup": "rbac.authorization.k8s.io"}},
		},
	}
}

type object struct {
	Kind     string         `json:"kind"`
	Metadata map[string]any `json:"metadata"`
	Spec     map[string]any `json:"spec"`
	Data     map[string]any `json:"data"`
}

func decode(t *testing.T, manifest []byte) map[string][]object {
	t.Helper()
	byKind := map[string][]object{}
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("rendered document does not parse: %v\n%s", err, doc)
		}
		if o.Kind != "" {
			byKind[o.Kind] = append(byKind[o.Kind], o)
		}
	}
	return byKind
}

func TestRenderEverything(t *testing.T) {
	out, err := Render(chartDir, allOn())
	if err != nil {
		t.Fatal(err)
	}
	byKind := decode(t, out)
	for kind, n := range map[string]int{
		"CustomResourceDefinition": 3, "Deployment": 3, "Service": 3, "ServiceMonitor": 1,
		"PrometheusRule": 1, "ConfigMap": 3, "ClusterRole": 7, "ClusterRoleBinding": 5, "Role": 4, "PodDisruptionBudget": 0,
		"DaemonSet": 1, "ValidatingAdmissionPolicy": 5,
	} {
		if got := len(byKind[kind]); got != n {
			t.Errorf("%d %s, want %d", got, kind, n)
		}
	}
	text := string(out)
	for _, want := range []string{
		"address: ipmi-dc2.fencing-dc2.svc:9443",
		"serverName: ipmi-dc3.fencing-dc3.svc",
		`resourceNames: ["bmc-credentials","bmc-dc2","bmc-dc3"]`,
		"conditionType: kubefence.io/leader",
		`rbac.ext-remediation/aggregate-to-ext-remediation: "true"`,
		`cluster.x-k8s.io/aggregate-to-manager: "true"`,
		"externalRemediation:\n      enabled: true",
		`- "--kube-api-qps=2"`,
		"- --leader-pod-condition",
		"- serve",
		"alert: KubefenceNoLeader",
		"alert: KubefenceRemoteAgentUnavailable",
		`deployment=~"kubefence-agent-ipmi-dc2|kubefence-agent-ipmi-dc3"`,
		`"uid": "kubefence"`,
		"- --tls-cert-file=/etc/kubefence/metrics-tls/tls.crt",
		"secretName: kubefence-metrics-tls",
		"name: prometheus-k8s",
		"scheme: https",
		`rbac.authorization.k8s.io/aggregate-to-view: "true"`,
		"resources: [nodefences/force, nodefences/confirm, nodefences/cancel]",
		"name: kubefence-oncall\nsubjects:\n  - apiGroup: rbac.authorization.k8s.io\n    kind: Group\n    name: oncall",
		"name: kubefence-requester\nsubjects:\n  - apiGroup: rbac.authorization.k8s.io\n    kind: Group\n    name: sre",
		"subresource('confirm').check('create')",
		"subresource('cancel').check('create')",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered chart lacks %q", want)
		}
	}
	for _, d := range byKind["Deployment"] {
		if d.Metadata["name"] == "kubefence-agent-ipmi-dc2" && d.Metadata["namespace"] != "fencing-dc2" {
			t.Errorf("remote agent dc2 in namespace %v, want fencing-dc2", d.Metadata["namespace"])
		}
	}
}

func TestRenderRefusesLeaderConditionWithPDB(t *testing.T) {
	_, err := Render(chartDir, map[string]any{"controller": map[string]any{"leaderPodCondition": true}})
	if err == nil || !strings.Contains(err.Error(), "podDisruptionBudget.enabled=false") {
		t.Fatalf("err = %v, want the leader condition and PDB refusal", err)
	}
}

// TestDefaultDeploymentHardening checks the hardening the controller's pods must have.
func TestDefaultDeploymentHardening(t *testing.T) {
	out, err := os.ReadFile(manifests)
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, want := range []string{
		"replicas: 2", "runAsNonRoot: true", "readOnlyRootFilesystem: true", "allowPrivilegeEscalation: false",
		"requiredDuringSchedulingIgnoredDuringExecution", "fieldPath: metadata.name", "fieldPath: metadata.namespace",
		"publishNotReadyAddresses: true", "minAvailable: 1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("default manifests lack %q", want)
		}
	}
	for _, forbidden := range []string{"verbs: [\"*\"]", "resources: [\"*\"]", "- '*'", "escalate", "impersonate"} {
		if strings.Contains(text, forbidden) {
			t.Errorf("default manifests contain %q", forbidden)
		}
	}
	// The bind verb, not the serving flags' "bind-address".
	for _, line := range strings.Split(text, "\n") {
		if line = strings.TrimSpace(line); (strings.HasPrefix(line, "verbs:") && strings.Contains(line, "bind")) || line == "- bind" {
			t.Errorf("default manifests grant bind: %s", line)
		}
	}
}

// TestRenderMetricsSecurity: by default /metrics is served over HTTPS to reviewed tokens
// (the controller may review them, scrapers get a ClusterRole, the ServiceMonitor sends
// Prometheus' token); metrics.secure=false serves plain HTTP and grants none of that
// (the controller's subjectaccessreviews stay: TestRenderWordPolicies).
func TestRenderMetricsSecurity(t *testing.T) {
	monitor := map[string]any{"serviceMonitor": map[string]any{"enabled": true}}
	secure := []string{
		"- --metrics-secure=true", "resources: [tokenreviews]",
		"name: kubefence-metrics-reader", "nonResourceURLs: [/metrics]", "scheme: https",
		"bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token", "insecureSkipVerify: true",
	}
	for name, tc := range map[string]struct {
		metrics       map[string]any
		want, lacking []string
	}{
		"default": {metrics: monitor, want: secure},
		"insecure": {metrics: map[string]any{"secure": false, "serviceMonitor": monitor["serviceMonitor"]},
			want: []string{"- --metrics-secure=false"}, lacking: secure[1:]},
		"with a CA": {metrics: map[string]any{"serviceMonitor": map[string]any{"enabled": true,
			"tlsConfig": map[string]any{"serverName": "kubefence-metrics.kubefence-system.svc"}}},
			want: []string{"serverName: kubefence-metrics.kubefence-system.svc"}, lacking: []string{"insecureSkipVerify"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := Render(chartDir, map[string]any{"metrics": tc.metrics})
			if err != nil {
				t.Fatal(err)
			}
			text := string(out)
			for _, want := range append(tc.want, "- --health-probe-bind-address=:8081", "port: health") {
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

// TestRenderHeartbeats: heartbeats put the peers' key into the agents and the controller,
// the agents' peer flags and the controller's heartbeats section, each with its ports;
// heartbeats without the agents' peers are refused, and so are peers without a key.
func TestRenderHeartbeats(t *testing.T) {
	values := map[string]any{
		"nodeAgent":  map[string]any{"enabled": true, "peers": map[string]any{"enabled": true, "keySecret": "peer-key"}},
		"heartbeats": map[string]any{"enabled": true},
	}
	out, err := Render(chartDir, values)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--peer-bind-address=0.0.0.0:7946", "--peer-advertise-address=$(POD_IP):7946", "--peer-key-file=/etc/kubefence/peer/key",
		"keyFile: /etc/kubefence/peer/key", "bindAddress: 0.0.0.0:7947", "kubeletTimeout: 1s",
		"name: heartbeats-udp", "secretName: peer-key", "fieldPath: status.podIP", "fsGroup: 65532",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("rendered with heartbeats: no %q", want)
		}
	}
	if bytes.Contains(out, []byte("probeInterval:")) {
		t.Errorf("rendered with heartbeats and no nodeAgent.peers.probeInterval: the seat's probeInterval is set, want its default")
	}
	// The seat probes the agents as often as they probe each other.
	values["nodeAgent"].(map[string]any)["peers"].(map[string]any)["probeInterval"] = "200ms"
	if out, err = Render(chartDir, values); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--peer-probe-interval=200ms", "probeInterval: 200ms"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("rendered with nodeAgent.peers.probeInterval 200ms: no %q", want)
		}
	}
	_, err = Render(chartDir, map[string]any{"nodeAgent": map[string]any{"enabled": true}, "heartbeats": map[string]any{"enabled": true}})
	if err == nil || !strings.Contains(err.Error(), "heartbeats.enabled needs nodeAgent.enabled and nodeAgent.peers.enabled") {
		t.Errorf("heartbeats without peers: err = %v", err)
	}
	_, err = Render(chartDir, map[string]any{"nodeAgent": map[string]any{"enabled": true, "peers": map[string]any{"enabled": true}}})
	if err == nil || !strings.Contains(err.Error(), "nodeAgent.peers.keySecret") {
		t.Errorf("peers without a key: err = %v", err)
	}
}

// TestRenderNetworkFence: a NetworkFence agent goes into the configuration as the
// controller's own (networkFence, no binary), and the controller's ClusterRole gains
// NetworkFences only when there is one.
func TestRenderNetworkFence(t *testing.T) {
	values := map[string]any{"networkFenceAgents": []any{map[string]any{
		"name": "ceph-rbd", "driver": "rbd.csi.ceph.com", "parameters": map[string]any{"clusterID": "rook-ceph"},
		"secret": map[string]any{"namespace": "rook-ceph", "name": "rook-csi-rbd-provisioner"}, "addressTypes": []any{"ExternalIP"},
		"timeout": "2m",
	}}}
	out, err := Render(chartDir, values)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"- name: ceph-rbd\n      networkFence:\n        addressTypes:\n        - ExternalIP\n        driver: rbd.csi.ceph.com",
		"clusterID: rook-ceph", "name: rook-csi-rbd-provisioner", "timeout: 2m",
		"resources: [networkfences]\n    verbs: [get, list, create, patch, delete]",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("rendered with a NetworkFence agent: no %q", want)
		}
	}
	plain, err := Render(chartDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(plain, []byte("networkfences")) {
		t.Error("rendered without NetworkFence agents: the ClusterRole still grants NetworkFences")
	}
	if _, err := Render(chartDir, map[string]any{"networkFenceAgents": []any{map[string]any{"name": "x", "driver": "d", "binary": "fence-agent-ipmi"}}}); err == nil {
		t.Error("a NetworkFence agent with a binary rendered: the values schema should refuse it")
	}
}

// TestRenderNodeAgentWatchdog: an emulated watchdog is refused unless the values say the
// cluster is a test, and then its socket directory and the node's boot ID file are
// mounted from the node, the agent is told both, unprivileged, and the controller counts
// emulated watchdogs; a device path is mounted as itself, and only then does the agent
// run privileged and as root, allowed a nowayout device only when the values say so; a
// device without peers, or a path that is neither, is refused naming the field.
func TestRenderNodeAgentWatchdog(t *testing.T) {
	emulated := map[string]any{"enabled": true,
		"watchdog":   map[string]any{"path": "unix:/run/kubefence-watchdog/$(NODE_NAME).sock", "timeout": "4s"},
		"bootIDFile": "/proc/sys/kernel/random/boot_id"}
	if _, err := Render(chartDir, map[string]any{"nodeAgent": emulated}); err == nil || !strings.Contains(err.Error(), "nodeAgent.watchdog.emulatedForTests") {
		t.Errorf("an emulated watchdog without emulatedForTests: err = %v, want it refused naming the value", err)
	}
	emulated["watchdog"].(map[string]any)["emulatedForTests"] = true
	out, err := Render(chartDir, map[string]any{"nodeAgent": emulated})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"allowEmulated: true",
		"- --watchdog=unix:/run/kubefence-watchdog/$(NODE_NAME).sock", "- --watchdog-timeout=4s", "- --boot-id-file=/host/boot_id",
		"mountPath: /run/kubefence-watchdog", "path: /run/kubefence-watchdog\n            type: Directory",
		"path: /proc/sys/kernel/random/boot_id\n            type: File", "allowPrivilegeEscalation: false",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("rendered with an emulated watchdog: no %q", want)
		}
	}
	if bytes.Contains(out, []byte("privileged: true")) {
		t.Error("rendered with an emulated watchdog: the agent runs privileged")
	}

	peers := map[string]any{"enabled": true, "keySecret": "kubefence-peer-key"}
	out, err = Render(chartDir, map[string]any{"nodeAgent": map[string]any{"enabled": true, "peers": peers,
		"watchdog": map[string]any{"path": "/dev/watchdog1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("--watchdog-allow-nowayout")) || bytes.Contains(out, []byte("allowEmulated")) {
		t.Error("rendered with a watchdog device and default values: nowayout allowed, or emulated watchdogs counted")
	}
	nowayout, err := Render(chartDir, map[string]any{"nodeAgent": map[string]any{"enabled": true, "peers": peers,
		"watchdog": map[string]any{"path": "/dev/watchdog1", "allowNowayout": true}}})
	if err != nil || !bytes.Contains(nowayout, []byte("- --watchdog-allow-nowayout\n")) {
		t.Errorf("rendered with a watchdog device and allowNowayout: no --watchdog-allow-nowayout (err %v)", err)
	}
	for _, want := range []string{
		"- --watchdog=/dev/watchdog1", "- --watchdog-timeout=5s",
		"- name: watchdog\n              mountPath: /dev/watchdog1\n",
		"path: /dev/watchdog1\n            type: CharDevice",
		"privileged: true\n            runAsNonRoot: false\n            runAsUser: 0\n",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("rendered with a watchdog device: no %q", want)
		}
	}
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		if bytes.Contains(doc, []byte("kind: DaemonSet")) && bytes.Contains(doc, []byte("allowPrivilegeEscalation: false")) {
			t.Error("rendered with a watchdog device: the agent has allowPrivilegeEscalation false beside privileged, which the API server refuses")
		}
	}

	for path, want := range map[string]string{
		"/dev/watchdog": "nodeAgent.peers.enabled",
		"dev/watchdog":  "path",
	} {
		_, err = Render(chartDir, map[string]any{"nodeAgent": map[string]any{"enabled": true, "watchdog": map[string]any{"path": path}}})
		if err == nil || !strings.Contains(err.Error(), "nodeAgent") || !strings.Contains(err.Error(), want) {
			t.Errorf("watchdog path %q without peers rendered or said the wrong thing: err = %v", path, err)
		}
	}
}

// TestRenderRemoteAgentFiles: the validate init container mounts each remote agent's
// client certificate where the controller reads it (it loads the files and dials the
// agent as the controller will); the remote agent's pod gives its serving certificate's
// Secret to its own group (it runs as 65532, the files are 0400); and each TLS Secret
// volume lists the three keys read, so that a Secret without one stops the pod at its
// mount.
func TestRenderRemoteAgentFiles(t *testing.T) {
	ctrl := fieldAt(t, renderedObject(t, allOn(), "Deployment", "-controller"), "spec", "template", "spec")
	mounts := map[string]map[string]any{} // container, then volume: mount path
	for _, list := range []string{"initContainers", "containers"} {
		for _, c := range ctrl[list].([]any) {
			c := c.(map[string]any)
			m := map[string]any{}
			for _, vm := range c["volumeMounts"].([]any) {
				vm := vm.(map[string]any)
				m[vm["name"].(string)] = vm["mountPath"]
			}
			mounts[c["name"].(string)] = m
		}
	}
	for _, container := range []string{"validate", "controller"} {
		for _, dc := range []string{"dc2", "dc3"} {
			if got, want := mounts[container]["client-tls-ipmi-"+dc], "/etc/kubefence/remote-agents/ipmi-"+dc; got != want {
				t.Errorf("container %s mounts client-tls-ipmi-%s at %v, want %s", container, dc, got, want)
			}
		}
	}
	checkTLSItems(t, ctrl, "client-tls-ipmi-dc2")
	for _, c := range ctrl["initContainers"].([]any) {
		if c := c.(map[string]any); c["name"] == "validate" && !strings.Contains(fmt.Sprint(c["command"]), "--require-files") {
			t.Errorf("the validate init container runs %v: without --require-files a certificate it lacks is only a warning", c["command"])
		}
	}
	agent := fieldAt(t, renderedObject(t, allOn(), "Deployment", "-agent-ipmi-dc2"), "spec", "template", "spec")
	sc := fieldAt(t, agent, "securityContext")
	if sc["runAsUser"] != float64(65532) || sc["fsGroup"] != float64(65532) {
		t.Errorf("remote agent pod securityContext %v: want runAsUser and fsGroup 65532", sc)
	}
	checkTLSItems(t, agent, "tls")
}

// checkTLSItems: pod spec's Secret volume name projects tls.crt, tls.key and ca.crt.
func checkTLSItems(t *testing.T, spec map[string]any, name string) {
	t.Helper()
	for _, v := range spec["volumes"].([]any) {
		v := v.(map[string]any)
		if v["name"] != name {
			continue
		}
		var keys []string
		items, _ := fieldAt(t, v, "secret")["items"].([]any)
		for _, it := range items {
			keys = append(keys, it.(map[string]any)["key"].(string))
		}
		if strings.Join(keys, ",") != "tls.crt,tls.key,ca.crt" {
			t.Errorf("volume %s projects keys %v, want tls.crt, tls.key and ca.crt", name, keys)
		}
		return
	}
	t.Errorf("no volume %s", name)
}
