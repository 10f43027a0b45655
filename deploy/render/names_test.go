package main

import (
	"fmt"
	"net"
	"path"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"
)

// An install as users vary it: the release's name, its namespace and the name values.
type install struct {
	release, namespace string
	values             map[string]any
	// lease is the leader Lease the controller is told.
	lease string
}

func installs() map[string]install {
	return map[string]install{
		// The default install's Lease keeps its name, so an upgrade keeps its leader.
		"kubefence in kubefence-system": {"kubefence", "kubefence-system", nil, "kubefence-controller"},
		"fencing in kubefence-system":   {"fencing", "kubefence-system", nil, "fencing-kubefence-controller"},
		"prod-fence in ops":             {"prod-fence", "ops", nil, "prod-fence-kubefence-controller"},
		"nameOverride":                  {"fencing", "ops", map[string]any{"nameOverride": "fencer"}, "fencing-fencer-controller"},
		"fullnameOverride":              {"kubefence", "kubefence-system", map[string]any{"fullnameOverride": "edge-fencer"}, "edge-fencer-controller"},
		"a leader Lease the user names": {"prod-fence", "kubefence-system",
			map[string]any{"config": map[string]any{"leaderElection": map[string]any{"name": "fencing-leader"}}}, "fencing-leader"},
	}
}

// everyPartOn is allOn with the node agents' peers and heartbeats too, under over.
func everyPartOn(over map[string]any) map[string]any {
	v := allOn()
	v["nodeAgent"].(map[string]any)["peers"] = map[string]any{"enabled": true, "keySecret": "kubefence-peer-key"}
	v["heartbeats"] = map[string]any{"enabled": true}
	return chartutil.CoalesceTables(deepCopy(over), v)
}

// TestRenderedNamesResolve installs the chart under several names and namespaces with
// every part on, and follows every name the rendering tells a container, a binding, a
// Service or an alert to what it names: the object must be rendered where it is looked
// for, and the rendered RBAC must let the pod's ServiceAccount do what it will do there.
func TestRenderedNamesResolve(t *testing.T) {
	for name, in := range installs() {
		t.Run(name, func(t *testing.T) {
			out, err := RenderAs(chartDir, everyPartOn(in.values), in.release, in.namespace)
			if err != nil {
				t.Fatal(err)
			}
			m := parseManifest(t, out)
			if le := controllerConfig(t, m).LeaderElection; le.Namespace != in.namespace || le.Name != in.lease {
				t.Errorf("the controller elects its leader on Lease %s/%s, want %s/%s", le.Namespace, le.Name, in.namespace, in.lease)
			}
			for _, w := range m.ofKind("Deployment", "DaemonSet") {
				checkWorkload(t, m, w)
			}
			checkBindings(t, m, in.namespace)
			checkSelectors(t, m)
			checkAlertTargets(t, m)
		})
	}
}

// TestTwoReleasesOneNamespace: two releases in one namespace share no object of their
// own (the CRDs are the cluster's) and no leader Lease.
func TestTwoReleasesOneNamespace(t *testing.T) {
	owned := func(release string) (map[string]bool, string) {
		out, err := RenderAs(chartDir, everyPartOn(nil), release, "kubefence-system")
		if err != nil {
			t.Fatal(err)
		}
		m := parseManifest(t, out)
		keys := map[string]bool{}
		for _, o := range m {
			if ns := str(o, "metadata", "namespace"); str(o, "kind") != "CustomResourceDefinition" && (ns == "" || ns == "kubefence-system") {
				keys[fmt.Sprintf("%s %s/%s", str(o, "kind"), ns, str(o, "metadata", "name"))] = true
			}
		}
		return keys, controllerConfig(t, m).LeaderElection.Name
	}
	a, leaseA := owned("kubefence")
	b, leaseB := owned("fencing")
	for k := range a {
		if b[k] {
			t.Errorf("releases kubefence and fencing both render %s", k)
		}
	}
	if leaseA == leaseB {
		t.Errorf("releases kubefence and fencing both elect their leader on Lease %s", leaseA)
	}
}

// checkWorkload follows the names a workload's pods are given: their ServiceAccount,
// ConfigMap volumes, environment, flags and configuration files.
func checkWorkload(t *testing.T, m manifest, w map[string]any) {
	t.Helper()
	ns := str(w, "metadata", "namespace")
	where := str(w, "kind") + " " + ns + "/" + str(w, "metadata", "name")
	pod := obj(w, "spec", "template", "spec")
	sa := str(pod, "serviceAccountName")
	switch {
	case sa == "" && at(pod, "automountServiceAccountToken") != false:
		t.Errorf("%s runs as its namespace's default ServiceAccount", where)
	case sa != "" && m.find("ServiceAccount", ns, sa) == nil:
		t.Errorf("%s runs as ServiceAccount %s, which is not rendered in %s", where, sa, ns)
	}
	for _, v := range list(pod, "volumes") {
		if cm := str(v, "configMap", "name"); cm != "" {
			if m.find("ConfigMap", ns, cm) == nil {
				t.Errorf("%s mounts ConfigMap %s, which is not rendered in %s", where, cm, ns)
				continue
			}
			checkConfigFiles(t, m, where, ns, sa, m.find("ConfigMap", ns, cm))
		}
	}
	for _, c := range append(list(pod, "initContainers"), list(pod, "containers")...) {
		checkContainer(t, m, where+" container "+str(c, "name"), ns, sa, c)
	}
}

// checkContainer follows a container's ConfigMap references and flags. Every
// fence-controller is told its pause ConfigMap: without the flag it watches the binary's
// default name, which the chart's Role may not name, and its caches never sync.
func checkContainer(t *testing.T, m manifest, where, ns, sa string, c any) {
	t.Helper()
	for _, e := range list(c, "env") {
		if cm := str(e, "valueFrom", "configMapKeyRef", "name"); cm != "" && m.find("ConfigMap", ns, cm) == nil {
			t.Errorf("%s: env %s reads ConfigMap %s, which is not rendered in %s", where, str(e, "name"), cm, ns)
		}
	}
	args := append(strs(c, "command"), strs(c, "args")...)
	flags := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(strings.TrimLeft(a, "-"), "="); ok && strings.HasPrefix(a, "-") {
			flags[k] = v
		}
	}
	pause, told := flags["pause-configmap"]
	if len(args) > 0 && path.Base(args[0]) == "fence-controller" && !told {
		t.Errorf("%s runs fence-controller without --pause-configmap", where)
	}
	if !told {
		return
	}
	if m.find("ConfigMap", ns, pause) == nil {
		t.Errorf("%s: --pause-configmap=%s, which is not rendered in %s", where, pause, ns)
	}
	m.requireAllowed(t, where, ns, sa, access{group: "", resource: "configmaps", namespace: ns, name: pause}, "get", "list", "watch")
}

// fenceConfig is what checkConfigFiles reads of a controller's configuration file.
type fenceConfig struct {
	Kind           string `json:"kind"`
	LeaderElection struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"leaderElection"`
	Watchdog struct {
		Namespace string `json:"namespace"`
	} `json:"watchdog"`
	Agents []struct {
		Name      string `json:"name"`
		Address   string `json:"address"`
		SecretRef *struct {
			Namespace  string `json:"namespace"`
			Name       string `json:"name"`
			Template   string `json:"template"`
			Annotation string `json:"annotation"`
		} `json:"secretRef"`
		TLS *struct {
			ServerName string `json:"serverName"`
		} `json:"tls"`
	} `json:"agents"`
}

// controllerConfig is the one controller configuration file the rendering holds.
func controllerConfig(t *testing.T, m manifest) fenceConfig {
	t.Helper()
	var found []fenceConfig
	for _, cm := range m.ofKind("ConfigMap") {
		for _, v := range obj(cm, "data") {
			var cfg fenceConfig
			if s, _ := v.(string); yaml.Unmarshal([]byte(s), &cfg) == nil && cfg.Kind == "FenceControllerConfiguration" {
				found = append(found, cfg)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d controller configuration files rendered, want 1", len(found))
	}
	return found[0]
}

// checkConfigFiles follows the names in every controller configuration file of cm, which
// a pod of namespace ns running as sa mounts: the leader Lease, the agents' report
// Leases, the agents' Secrets and the remote agents' Services.
func checkConfigFiles(t *testing.T, m manifest, where, ns, sa string, cm map[string]any) {
	t.Helper()
	for key, v := range obj(cm, "data") {
		var cfg fenceConfig
		if s, _ := v.(string); yaml.Unmarshal([]byte(s), &cfg) != nil || cfg.Kind != "FenceControllerConfiguration" {
			continue
		}
		file := fmt.Sprintf("%s: ConfigMap %s key %s", where, str(cm, "metadata", "name"), key)
		le := cfg.LeaderElection
		if le.Namespace != ns || le.Name == "" {
			t.Errorf("%s: leaderElection %s/%s, want a Lease in the release namespace %s (the pause ConfigMap is looked for there)", file, le.Namespace, le.Name, ns)
		}
		m.requireAllowed(t, file, ns, sa, access{group: "coordination.k8s.io", resource: "leases", namespace: le.Namespace, name: le.Name}, "get", "update")
		m.requireAllowed(t, file, ns, sa, access{group: "coordination.k8s.io", resource: "leases", namespace: le.Namespace}, "create")
		reports := cfg.Watchdog.Namespace
		if reports == "" {
			reports = le.Namespace
		}
		m.requireAllowed(t, file, ns, sa, access{group: "coordination.k8s.io", resource: "leases", namespace: reports}, "list", "watch")
		for _, a := range cfg.Agents {
			if s := a.SecretRef; s != nil {
				m.requireAllowed(t, file+" agent "+a.Name, ns, sa, access{group: "", resource: "secrets", namespace: s.Namespace, name: s.Name}, "get")
			}
			if a.Address != "" {
				checkAgentAddress(t, m, file+" agent "+a.Name, a.Address, a.TLS.ServerName)
			}
		}
	}
}

// checkAgentAddress: a remote agent's address NAME.NAMESPACE.svc:PORT is a rendered
// Service's port, and the name its certificate is checked against is that host.
func checkAgentAddress(t *testing.T, m manifest, where, address, serverName string) {
	t.Helper()
	host, port, err := net.SplitHostPort(address)
	svc, rest, _ := strings.Cut(host, ".")
	ns, _, _ := strings.Cut(rest, ".")
	if err != nil || !strings.HasSuffix(host, ".svc") {
		t.Errorf("%s: address %q, want NAME.NAMESPACE.svc:PORT", where, address)
		return
	}
	if serverName != host {
		t.Errorf("%s: dials %s, checks its certificate for %s", where, host, serverName)
	}
	s := m.find("Service", ns, svc)
	if s == nil {
		t.Errorf("%s: dials %s, and no Service %s is rendered in %s", where, address, svc, ns)
		return
	}
	for _, p := range list(s, "spec", "ports") {
		if fmt.Sprint(at(p, "port")) == port {
			return
		}
	}
	t.Errorf("%s: dials %s, and Service %s/%s has no port %s", where, address, ns, svc, port)
}

// checkBindings: every binding's role is rendered, and so is every ServiceAccount of the
// release namespace it binds; every admission policy binding's policy is rendered, and
// every ServiceAccount a policy names by user name.
func checkBindings(t *testing.T, m manifest, releaseNS string) {
	t.Helper()
	for _, b := range m.ofKind("RoleBinding", "ClusterRoleBinding") {
		where := fmt.Sprintf("%s %s/%s", str(b, "kind"), str(b, "metadata", "namespace"), str(b, "metadata", "name"))
		if m.roleOf(b) == nil {
			t.Errorf("%s binds %s %s, which is not rendered", where, str(b, "roleRef", "kind"), str(b, "roleRef", "name"))
		}
		for _, s := range list(b, "subjects") {
			if str(s, "kind") == "ServiceAccount" && str(s, "namespace") == releaseNS && m.find("ServiceAccount", releaseNS, str(s, "name")) == nil {
				t.Errorf("%s binds ServiceAccount %s/%s, which is not rendered", where, releaseNS, str(s, "name"))
			}
		}
	}
	for _, b := range m.ofKind("ValidatingAdmissionPolicyBinding") {
		if m.find("ValidatingAdmissionPolicy", "", str(b, "spec", "policyName")) == nil {
			t.Errorf("ValidatingAdmissionPolicyBinding %s names policy %s, which is not rendered", str(b, "metadata", "name"), str(b, "spec", "policyName"))
		}
	}
	user := regexp.MustCompile(`system:serviceaccount:([a-z0-9.-]+):([a-z0-9.-]+)`)
	for _, p := range m.ofKind("ValidatingAdmissionPolicy") {
		spec, _ := yaml.Marshal(p["spec"])
		for _, u := range user.FindAllStringSubmatch(string(spec), -1) {
			if m.find("ServiceAccount", u[1], u[2]) == nil {
				t.Errorf("ValidatingAdmissionPolicy %s names user %s, whose ServiceAccount is not rendered", str(p, "metadata", "name"), u[0])
			}
		}
	}
}
