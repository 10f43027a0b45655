package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubefence/kubefence/test/sim"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// onCall is a person on call: a ServiceAccount bound to the chart's on-call roles, with a
// kubeconfig of its own, kubectl and the kubectl fence plugin on PATH.
type onCall struct {
	user       string // the user name the API server gives the person
	kubeconfig string
	path       string // PATH with kubectl and kubectl-fence
}

// newOnCall makes the person: the ServiceAccount "on-call" in the release namespace,
// bound to the chart's on-call ClusterRole and its Role in the release namespace (what
// userRoles.onCall binds), and a token of it in a kubeconfig.
func newOnCall(t *testing.T, ctx context.Context, c *Cluster) *onCall {
	t.Helper()
	const name = "on-call"
	cs := c.Client
	if _, err := cs.CoreV1().ServiceAccounts(Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: Namespace}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-" + name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: Fullname + "-oncall"}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(Namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-" + name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: Fullname + "-oncall-pause"}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := c.TokenKubeconfig(t.TempDir(), name, tr.Status.Token)
	if err != nil {
		t.Fatal(err)
	}
	return &onCall{user: "system:serviceaccount:" + Namespace + ":" + name, kubeconfig: kubeconfig, path: onCallPath(t, ctx)}
}

// clusterAdmin is the cluster's admin as a person on call: the admin kubeconfig, kubectl
// and the kubectl fence plugin on PATH.
func clusterAdmin(t *testing.T, ctx context.Context, c *Cluster) *onCall {
	t.Helper()
	return &onCall{user: "cluster admin", kubeconfig: c.Kubeconfig, path: onCallPath(t, ctx)}
}

// onCallPath is a PATH with kubectl and kubectl-fence, built from this tree.
func onCallPath(t *testing.T, ctx context.Context) string {
	t.Helper()
	root, err := sim.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := sim.BuildKubectlFence(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(root, ".cache", "controlplane", sim.KubeVersion, "bin", "kubectl")
	return filepath.Dir(kubectl) + ":" + filepath.Dir(plugin) + ":/usr/bin:/bin"
}

// kubectlFenceWord is a `kubectl fence` command at the start of a line or after a pipe.
var kubectlFenceWord = regexp.MustCompile(`kubectl fence ([a-z-]+)`)

// docObjects are the runbooks' names of the release `kubefence`'s objects that begin with
// its full name: another release's begin with its own (docs/runbooks.md).
var docObjects = regexp.MustCompile(`\bkubefence-(pause|controller|agent-)`)

// try runs script with bash as the person (kubeconfig: theirs, or the cluster's admin
// one when admin), as written but for the release's names: the docs' namespace becomes
// the test's, their object names the release's, and each `kubectl fence` command names
// the test's namespace. A watch (kubectl get -w) runs for 3 seconds. It returns the
// script as run, its output and its exit code.
func (p *onCall) try(t *testing.T, ctx context.Context, c *Cluster, admin bool, script string) (string, string, int) {
	t.Helper()
	script = strings.ReplaceAll(script, "-n "+DocNamespace, "-n "+Namespace)
	script = docObjects.ReplaceAllString(script, Fullname+"-$1")
	script = kubectlFenceWord.ReplaceAllString(script, "kubectl fence $1 -n "+Namespace)
	script = sim.RunbookWatch.ReplaceAllString(script, "timeout 3 $1 || test $$? -eq 124$2")
	kubeconfig := p.kubeconfig
	if admin {
		kubeconfig = c.Kubeconfig
	}
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Env = []string{"KUBECONFIG=" + kubeconfig, "HOME=" + t.TempDir(), "PATH=" + p.path}
	cmd.WaitDelay = 5 * time.Second
	out, _ := cmd.CombinedOutput()
	return script, string(out), cmd.ProcessState.ExitCode()
}

// run is try, failing the test unless the script exits with code exit; it returns the
// output.
func (p *onCall) run(t *testing.T, ctx context.Context, c *Cluster, admin bool, exit int, script string) string {
	t.Helper()
	script, out, code := p.try(t, ctx, c, admin, script)
	if code != exit {
		t.Fatalf("exit code %d, want %d:\n%s\noutput:\n%s", code, exit, script, out)
	}
	t.Logf("%s\n%s", script, out)
	return out
}

// runbook runs the runbooks' block that holds every one of lines, with the placeholders
// filled in from values.
func (p *onCall) runbook(t *testing.T, ctx context.Context, c *Cluster, admin bool, exit int, values map[string]string, lines ...string) string {
	t.Helper()
	r, err := sim.ReadRunbooks()
	if err != nil {
		t.Fatal(err)
	}
	block := r.Block(lines...)
	if block == "" {
		t.Fatalf("docs/runbooks.md has no sh block with %q", lines)
	}
	return p.run(t, ctx, c, admin, exit, fill(t, block, values))
}

// fill is block with its placeholders filled in from values; a placeholder values lacks
// fails the test.
func fill(t *testing.T, block string, values map[string]string) string {
	t.Helper()
	return sim.RunbookPlaceholder.ReplaceAllStringFunc(block, func(ph string) string {
		v, ok := values[ph]
		if !ok {
			t.Fatalf("docs/runbooks.md's block %q has the placeholder %s, which this test does not fill in", block, ph)
		}
		return v
	})
}

// onCallRound is one incident driven end to end only through `kubectl fence` and the
// runbooks' commands as written, by a person on call with a kubeconfig of their own.
// target dies while its BMC cannot be reached (its ipmi_sim stopped: it answers nothing),
// so every power-off fails and nothing is released. The person is granted explain and
// check by the runbooks' own commands; reads the runbooks' first look; asks the leader
// to explain the node and to check the devices; pauses fencing and resumes it; confirms
// the node off as KubefenceFencingFailed's runbook says; reads the node's history and
// runs KubefenceNodeLeftOff's first step. The incident records the person's word, web-0
// runs on another node, and no power request reached the BMC. Then the BMC answers
// again, target is powered on and its incident Recovered. It returns the NodeFence.
func onCallRound(t *testing.T, ctx context.Context, c *Cluster, target string) string {
	t.Helper()
	p := newOnCall(t, ctx, c)
	p.runbook(t, ctx, c, true, 0, map[string]string{"PERSON": p.user}, "create role kubefence-ask-leader")

	if err := c.MovePod(ctx, "web", target); err != nil {
		t.Fatal(err)
	}
	oldBoot := c.Node(target).BootID()
	b := c.BMC(target)
	if err := syscall.Kill(b.PID(), syscall.SIGSTOP); err != nil {
		t.Fatalf("stop the BMC of %s: %v", target, err)
	}
	stopped := true
	resume := func() {
		if stopped {
			if err := syscall.Kill(b.PID(), syscall.SIGCONT); err != nil {
				t.Errorf("resume the BMC of %s: %v", target, err)
			}
			stopped = false
		}
	}
	defer resume()
	began := time.Now()
	if err := c.Crash(ctx, target); err != nil {
		t.Fatal(err)
	}
	var nf string
	waitFor(t, ctx, "an incident of "+target+" with a failed power-off", func() (bool, error) {
		name, kinds, err := failedAttempts(ctx, c, target, began)
		nf = name
		return len(kinds) > 0, err
	})
	t.Logf("%s: incident %s, a power-off failed %s after the crash", target, nf, since(began, time.Now()))
	values := map[string]string{"NODE": target, "NAME": nf}

	out := p.runbook(t, ctx, c, true, 0, values, "kubectl fence status", "kubectl get nodefences -o wide")
	mustContain(t, "the runbooks' first look", out, nf, "pod ")
	// check exits 1: a device did not answer.
	out = p.runbook(t, ctx, c, false, 1, values, "kubectl fence explain NODE\nkubectl fence check")
	mustContain(t, "kubectl fence explain and check, asked of the leader", out,
		"answered:  by the leader ", "incident:  "+nf, "rule now:  ", target)

	out = p.run(t, ctx, c, false, 0, `kubectl fence pause --name bmc-network --reason "BMC network of `+target+` down"
kubectl fence status`)
	mustContain(t, "kubectl fence pause and status", out, "bmc-network", p.user, "BMC network of "+target+" down")
	out = p.run(t, ctx, c, false, 0, "kubectl fence resume --name bmc-network\nkubectl fence status -o json")
	mustContain(t, "kubectl fence resume and status -o json", out, "lifted bmc-network; 0 pause request(s) stand", `"pause": []`)

	// KubefenceFencingFailed, step 3: the machine is off by other means.
	p.runbook(t, ctx, c, false, 0, values, "kubectl fence confirm-off NODE --incident NAME")
	waitFor(t, ctx, "web-0 running on another node than "+target+" after the confirm-off", func() (bool, error) {
		pod := c.RunningPod(ctx, "default", "web-0")
		return pod != nil && pod.Spec.NodeName != target, nil
	})
	confirmedBy(t, ctx, c, target, nf, p.user)
	if off := bmcOffsSince(t, b, began); off != 0 {
		t.Fatalf("the BMC of %s, which answered nothing, logged %d power-offs", target, off)
	}
	out = p.run(t, ctx, c, false, 0, "kubectl fence history "+target)
	mustContain(t, "kubectl fence history", out, nf, "Remediated")

	// KubefenceNodeLeftOff, step 1, once the BMC answers again.
	resume()
	out = p.runbook(t, ctx, c, true, 0, values, "kubectl fence history NODE", "kubectl fence check NODE")
	mustContain(t, "KubefenceNodeLeftOff's first step", out, nf, "Remediated", "confirmedOff")
	powerOnAndRecover(t, ctx, c, target, nf, oldBoot)
	revokeAskLeader(t, ctx, c, p)
	return nf
}

// revokeAskLeader deletes the grant of the runbooks' exec block (kubefence-ask-leader).
func revokeAskLeader(t *testing.T, ctx context.Context, c *Cluster, p *onCall) {
	t.Helper()
	p.run(t, ctx, c, true, 0, "kubectl -n "+DocNamespace+" delete rolebinding,role kubefence-ask-leader")
}

// failedAttempts is target's newest incident opened after began and the error kinds of
// its failed attempts.
func failedAttempts(ctx context.Context, c *Cluster, target string, began time.Time) (string, []string, error) {
	nfs, err := c.NodeFences(ctx, target)
	if err != nil {
		return "", nil, err
	}
	var newest *unstructured.Unstructured
	for i := range nfs {
		if nfs[i].GetCreationTimestamp().After(began.Add(-time.Second)) &&
			(newest == nil || newest.GetCreationTimestamp().Time.Before(nfs[i].GetCreationTimestamp().Time)) {
			newest = &nfs[i]
		}
	}
	if newest == nil {
		return "", nil, fmt.Errorf("no incident of %s yet", target)
	}
	attempts, _, _ := unstructured.NestedSlice(newest.Object, "status", "attempts")
	var kinds []string
	for _, a := range attempts {
		if k, _, _ := unstructured.NestedString(a.(map[string]any), "errorKind"); k != "" {
			kinds = append(kinds, k)
		}
	}
	return newest.GetName(), kinds, nil
}

// confirmedBy fails unless incident nf of target is Remediated on a confirm-off by user.
func confirmedBy(t *testing.T, ctx context.Context, c *Cluster, target, nf, user string) {
	t.Helper()
	waitFor(t, ctx, "NodeFence "+nf+" Remediated on "+user+"'s confirm-off", func() (bool, error) {
		nfs, err := c.NodeFences(ctx, target)
		if err != nil {
			return false, err
		}
		for _, f := range nfs {
			if f.GetName() != nf {
				continue
			}
			by, _, _ := unstructured.NestedString(f.Object, "status", "confirmedOff", "by")
			if phaseOf(f) == "Remediated" && by == user {
				return true, nil
			}
			b, _ := json.Marshal(f.Object["status"])
			return false, fmt.Errorf("phase %s, confirmedOff by %q: %s", phaseOf(f), by, b)
		}
		return false, fmt.Errorf("no NodeFence %s", nf)
	})
}

// bmcOffsSince counts the power-offs b logged after from.
func bmcOffsSince(t *testing.T, b *bmc.IPMISim, from time.Time) int {
	t.Helper()
	events, err := b.Events()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		if e.Action == bmc.ActionOff && e.Time.After(from) {
			n++
		}
	}
	return n
}

// mustContain fails the test unless out holds every one of want.
func mustContain(t *testing.T, what, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("%s printed no %q:\n%s", what, w, out)
		}
	}
}
