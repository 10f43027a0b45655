package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestValidateConfigAsksTheAgents: fence-controller --validate-config,
// with the real agent binaries in its plugin directory, refuses parameters the agents
// refuse, each at its field path (agents[0].params.cipherSuite) and naming the agent, and
// an agent that requires credentials (its Describe says so) without a secretRef; the
// controller refuses to start on them, before it talks to any cluster; and a bad file
// gets exit code 1 and the field (or the line) on stderr.
func TestValidateConfigAsksTheAgents(t *testing.T) {
	t.Parallel()
	needClusterLabs(t, fenceIPMILan)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, plugins := filepath.Join(dir, "bin"), filepath.Join(dir, "plugins")
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(os.PathSeparator),
		"./cmd/fence-controller", "./cmd/fence-agent-ipmi", "./cmd/fence-agent-exec", "./cmd/fence-agent-cloud")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for _, a := range []string{"ipmi", "exec", "cloud"} {
		if sums[a], err = copyFile(filepath.Join(bin, "fence-agent-"+a), filepath.Join(plugins, a)); err != nil {
			t.Fatal(err)
		}
	}
	config := func(agent, params string) string {
		return fmt.Sprintf(`apiVersion: config.kubefence.io/v1alpha1
kind: FenceControllerConfiguration
pluginDir: %s
agents:
- name: %s
  sha256: %s
  target: {annotation: example.com/target}
  secretRef: {namespace: kubefence-system, name: credentials}
  params: {%s}
policies:
- name: default
  levels: [{agents: [%s]}]
`, plugins, agent, sums[agent], params, agent)
	}
	// The sample of docs/getting-started.md, which passes as written: its remote agent's
	// certificate files are paths in the controller's pod.
	doc, err := os.ReadFile(filepath.Join(root, "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sample, _ := strings.Cut(string(doc), "<!-- checked by TestGettingStartedConfig")
	_, sample, _ = strings.Cut(sample, "```yaml\n")
	sample, _, _ = strings.Cut(sample, "```")
	noSecret := func(doc string) string {
		return strings.Replace(doc, "  secretRef: {namespace: kubefence-system, name: credentials}\n", "", 1)
	}
	for name, tc := range map[string]struct {
		doc, stderr string
		code        int
	}{
		"getting-started's sample": {sample, "warning: agents[0] (ipmi-dc2): tls.certFile /tls/tls.crt, tls.keyFile /tls/tls.key, tls.caFile /tls/ca.crt not on this machine: read where the controller runs (agent not checked)", 0},
		"ipmi valid":               {config("ipmi", "cipherSuite: '17'"), "", 0},
		"ipmi cipher suite 99": {config("ipmi", "cipherSuite: '99'"),
			`config: agents[0].params.cipherSuite: Invalid value: "99" is not a cipher suite ID (0-17) (agent ipmi)`, 1},
		// The agent's Describe marks its user name and password required.
		"ipmi without secretRef": {noSecret(config("ipmi", "")),
			"config: agents[0].secretRef: Required value: agent ipmi (ipmi) needs the secret parameters username, password: name the Secret that holds them", 1},
		"redfish without secretRef": {noSecret(config("ipmi", "protocol: redfish")),
			"config: agents[0].secretRef: Required value: agent ipmi (ipmi) needs the secret parameters username, password", 1},
		"cloud without secretRef": {noSecret(config("cloud", "region: eu-west-1")), "", 0},
		"exec unknown parameter": {config("exec", "script: "+fenceIPMILan+", colour: blue"),
			"config: agents[0].params.colour: Invalid value: not among the parameters fence_ipmilan's metadata lists", 1},
		"exec known parameters": {config("exec", "script: "+fenceIPMILan+", target_key: ip, lanplus: '1', cipher: '3'"), "", 0},
		"exec relative script": {config("exec", "script: fence_ipmilan"),
			`config: agents[0].params.script: Invalid value: "fence_ipmilan" is not an absolute path (agent exec)`, 1},
		"cloud password param": {config("cloud", "provider: aws, password: hunter2"),
			"agents[0].params.password: Invalid value: is a secret; pass it in the agent's secret, not in params (agent cloud)", 1},
		"50,000 unknown parameters": {config("ipmi", manyParams(50000)),
			"config: agents[0].params: Too many: 50000: must have at most 64 items", 1},
		"control character": {strings.Replace(config("ipmi", ""), "name: default", "name: \"de\x01fault\"", 1),
			`config: line 11, column 12: control character U+0001 is not allowed in YAML`, 1},
		"unversioned file": {strings.SplitN(config("ipmi", ""), "\n", 3)[2], "warning: the configuration has no apiVersion and kind", 0},
		"bad field":        {strings.Replace(config("ipmi", ""), "levels: [{agents: [ipmi]}]", "levels: [{agents: [ipmi], retries: lots}]", 1), "policies[0].levels[0].retries", 1},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := runController(ctx, t, bin, "--validate-config", "--config", path)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want exit %d and stderr with %q", code, stderr, tc.code, tc.stderr)
			}
			if code == 0 && !strings.Contains(stdout, "valid") {
				t.Errorf("stdout %q, want it to say valid", stdout)
			}
			if strings.Contains(stderr, "hunter2") {
				t.Errorf("a secret passed as a parameter was echoed: %q", stderr)
			}
			t.Logf("exit %d: %s", code, strings.TrimSpace(stderr))
			if code == 0 {
				return
			}
			// The same file stops the controller itself before it reaches any cluster.
			kc := filepath.Join(dir, "kubeconfig")
			if err := os.WriteFile(kc, []byte(unreachableKubeconfig), 0o600); err != nil {
				t.Fatal(err)
			}
			code, _, stderr = runController(ctx, t, bin, "--config", path, "--kubeconfig", kc)
			// The controller logs the error as a quoted value: compare what comes before
			// the first quote.
			want, _, _ := strings.Cut(tc.stderr, `"`)
			if code != 1 || !strings.Contains(stderr, want) {
				t.Errorf("controller start: exit %d, stderr %q; want exit 1 naming %q", code, stderr, want)
			}
		})
	}
}

// manyParams is n parameters p0, p1, ... for a flow mapping.
func manyParams(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("p%d: '1'", i)
	}
	return strings.Join(names, ", ")
}

// unreachableKubeconfig points at a port where nothing listens: a controller that got as
// far as talking to the cluster would hang on it, not exit on its configuration.
const unreachableKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

func runController(ctx context.Context, t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "fence-controller"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit) && ctx.Err() == nil:
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("fence-controller %v: %v\n%s", args, err, stderr.String())
	return 0, "", ""
}
