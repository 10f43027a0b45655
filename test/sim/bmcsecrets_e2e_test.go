package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// A password per BMC: node-1 and node-3 (rack a) name their Secrets by a template over
// the node, node-2 (rack b) by an annotation.
const (
	rackLabel        = "kubefence.test/rack"
	secretAnnotation = "fencing.kubefence.io/bmc-secret"
	byTemplate       = "ipmi-by-template"
	byAnnotation     = "ipmi-by-annotation"
	node2Secret      = "rack-b-bmc-2"
)

// bmcPasswords are each BMC's own password; staleNode3 and rotatedNode3 are node-3's
// wrong one and the one it is rotated to. All of them are looked for where none may be.
var (
	bmcPasswords             = map[string]string{"node-1": "pw-one-1", "node-2": "pw-two-2", "node-3": "pw-three-3"}
	staleNode3, rotatedNode3 = "pw-stale-3", "pw-rotated-3"
)

// perNodeSecrets replaces the harness's agent (one Secret for every node) by two agents
// of the same binary that choose each node's Secret: by template for rack a, by
// annotation for rack b. The budgets let both racks' nodes be fenced at once.
func perNodeSecrets(c *v1alpha1.Config) {
	tpl, ann := c.Agents[0], c.Agents[0]
	tpl.Name, tpl.Binary = byTemplate, ipmiAgent
	tpl.SecretRef = &v1alpha1.SecretRef{Namespace: ControllerNamespace, Template: "bmc-{{ .Name }}"}
	ann.Name, ann.Binary = byAnnotation, ipmiAgent
	ann.SecretRef = &v1alpha1.SecretRef{Namespace: ControllerNamespace, Annotation: secretAnnotation}
	c.Agents = []v1alpha1.Agent{tpl, ann}
	all := intstr.FromString("100%")
	rack := func(name, agent string) v1alpha1.Policy {
		return v1alpha1.Policy{Name: "rack-" + name, NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{rackLabel: name}},
			Levels: []v1alpha1.Level{{Agents: []string{agent}}}, Budget: v1alpha1.Budget{MaxUnhealthy: &all}}
	}
	c.Policies = []v1alpha1.Policy{rack("a", byTemplate), rack("b", byAnnotation)}
}

// racks labels the nodes with their rack, and has node-2 name its Secret.
func racks(o *Options) {
	for i := range o.Nodes {
		n := &o.Nodes[i]
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[rackLabel] = "a"
		if n.Name == "node-2" {
			n.Labels[rackLabel] = "b"
			n.Annotations[secretAnnotation] = node2Secret
		}
	}
}

// putCredentials creates or replaces Secret name with password, labelled as kubefence's
// credentials.
func putCredentials(t *testing.T, ctx context.Context, h *Harness, name, password string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ControllerNamespace, Name: name,
		Labels: map[string]string{v1alpha1.CredentialsLabel: v1alpha1.CredentialsLabelValue}},
		StringData: map[string]string{"username": "admin", "password": password}}
	secrets := h.Cluster.Client.CoreV1().Secrets(ControllerNamespace)
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err == nil {
		return
	}
	if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret %s: %v", name, err)
	}
}

// TestPasswordPerBMC: three ipmi_sim BMCs with three passwords, each node's Secret chosen
// per node (by template, by annotation). `fence-controller check` names the node whose
// Secret is missing and the node whose BMC refuses its Secret's password, with the
// Secret. Once they are right, the leader's monitor reads every BMC; node-3's password
// is rotated at its BMC (its reads fail) and then in its Secret, and the next read takes
// it, with no restart. Both racks' crashed nodes are then fenced, each through its own
// password. No password shows in argv, environment, logs, events, metrics or status.
func TestPasswordPerBMC(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := fastHarnessWith(t, ctx, HarnessOptions{Config: perNodeSecrets, Cluster: racks,
		BMC: func(name string, o *bmc.IPMIOptions) { o.Password = bmcPasswords[name] }})
	leaks := &leakWatch{passwords: append([]string{staleNode3, rotatedNode3}, bmcPasswords["node-1"], bmcPasswords["node-2"], bmcPasswords["node-3"])}
	putCredentials(t, ctx, h, "bmc-node-1", bmcPasswords["node-1"])
	putCredentials(t, ctx, h, "bmc-node-3", staleNode3)
	checkNamesSecrets(t, ctx, h, leaks)

	putCredentials(t, ctx, h, node2Secret, bmcPasswords["node-2"])
	putCredentials(t, ctx, h, "bmc-node-3", bmcPasswords["node-3"])
	leader := startLeader(t, ctx, h, "controller", "--target-check-interval=1s")
	metrics := metricsURL(t, ctx, leader)
	up := func(node, agent, want string) {
		t.Helper()
		line := fmt.Sprintf(`kubefence_target_up{agent=%q,node=%q} %s`, agent, node, want)
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			leaks.scan()
			return strings.Contains(scrape(ctx, metrics), line), nil
		}); err != nil {
			t.Fatalf("/metrics never showed %s", line)
		}
	}
	up("node-1", byTemplate, "1")
	up("node-2", byAnnotation, "1")
	up("node-3", byTemplate, "1")

	if err := h.BMCs["node-3"].SetPassword(ctx, rotatedNode3); err != nil {
		t.Fatal(err)
	}
	up("node-3", byTemplate, "0")
	putCredentials(t, ctx, h, "bmc-node-3", rotatedNode3)
	up("node-3", byTemplate, "1")
	select {
	case <-leader.Done():
		t.Fatalf("the leader exited (code %d); the rotation must need no restart", leader.ExitCode())
	default:
	}

	fenceBothRacks(t, ctx, h, leaks)
	leaks.check(t, "the leader's log", leader.Log())
	leaks.check(t, "/metrics", scrape(ctx, metrics))
	leaks.checkEvents(t, ctx, h.Cluster)
	leaks.check(t, "process argv and environment", strings.Join(leaks.seen, "\n"))
}

// checkNamesSecrets runs `fence-controller check` while node-2's Secret is missing and
// node-3's holds a password its BMC refuses: both rows are errors that name the node
// and the Secret, node-1's reads on, and the exit code is 1.
func checkNamesSecrets(t *testing.T, ctx context.Context, h *Harness, leaks *leakWatch) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(h.bin, "fence-controller"), "check", "--config", h.ConfigPath, "--kubeconfig", h.Cluster.Kubeconfig)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	t.Logf("fence-controller check:\n%s", out.String())
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("check exited with %v, want 1 (two devices refused); stderr %s", err, errOut.String())
	}
	ns := regexp.QuoteMeta(ControllerNamespace)
	for node, want := range map[string]string{
		"node-1": byTemplate + `\s+127\.0\.0\.1:\d+\s+on\s`,
		"node-2": byAnnotation + `\s+127\.0\.0\.1:\d+\s+error\s.*node node-2: read secret ` + ns + `/` + node2Secret + `: secrets "` + node2Secret + `" not found`,
		"node-3": byTemplate + `\s+127\.0\.0\.1:\d+\s+error\s.*node node-3, with the credentials of secret ` + ns + `/bmc-node-3: .*credentials`,
	} {
		if !regexp.MustCompile(`(?m)^` + node + `\s+` + want).MatchString(out.String()) {
			t.Errorf("check output lacks %s as %s", node, want)
		}
	}
	leaks.check(t, "check's output", out.String()+errOut.String())
}

// fenceBothRacks crashes node-1 (rack a, Secret by template) and node-2 (rack b, by
// annotation) and waits until each is fenced: its BMC, which takes only its own
// password, logged the power off, and its incident verified through its rack's agent.
func fenceBothRacks(t *testing.T, ctx context.Context, h *Harness, leaks *leakWatch) {
	t.Helper()
	victims := map[string]string{"node-1": byTemplate, "node-2": byAnnotation}
	for node := range victims {
		h.Cluster.Node(node).Crash()
	}
	for node, agent := range victims {
		var incs []v1alpha1.NodeFence
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			leaks.scan()
			ev, err := h.BMCs[node].Events()
			if _, off := FirstPowerOff(ev); err != nil || !off {
				return false, nil
			}
			incs, err = Incidents(ctx, h.Cluster, node)
			return err == nil && len(incs) > 0 && fencedBy(incs[len(incs)-1], agent), nil
		})
		if err != nil {
			t.Fatalf("%s was not fenced through %s: %v (incidents %+v)", node, agent, err, incs)
		}
		status, _ := json.Marshal(incs)
		leaks.check(t, node+"'s NodeFence", string(status))
	}
}

// fencedBy reports whether incident nf reached Fenced or beyond through a verified
// attempt of agent.
func fencedBy(nf v1alpha1.NodeFence, agent string) bool {
	if p := nf.Status.Phase; p != v1alpha1.PhaseFenced && p != v1alpha1.PhaseRemediated {
		return false
	}
	for _, a := range nf.Status.Attempts {
		if a.Agent == agent && a.State == v1alpha1.AttemptVerified {
			return true
		}
	}
	return false
}

// leakWatch looks for passwords where credentials never go. scan reads the argv and
// environment of every process on the machine, as often as it is called, so that
// short-lived ones (ipmitool) are caught while they run.
type leakWatch struct {
	passwords []string
	seen      []string // processes whose argv or environment held a password
}

func (l *leakWatch) scan() {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), f))
			if err != nil {
				continue
			}
			for _, p := range l.passwords {
				if bytes.Contains(b, []byte(p)) {
					l.seen = append(l.seen, fmt.Sprintf("pid %s %s: %q", e.Name(), f, strings.ReplaceAll(string(b), "\x00", " ")))
				}
			}
		}
	}
}

// check fails t if text, from where, holds a password.
func (l *leakWatch) check(t *testing.T, where, text string) {
	t.Helper()
	for _, p := range l.passwords {
		if strings.Contains(text, p) {
			t.Errorf("a BMC password is in %s", where)
		}
	}
}

// checkEvents looks for the passwords in every Event of the cluster.
func (l *leakWatch) checkEvents(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	events, err := c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(events)
	l.check(t, "the Events", string(b))
}
