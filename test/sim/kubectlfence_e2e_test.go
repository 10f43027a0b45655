package sim

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/kubectlfence"
)

// kubectlFenceBinary builds cmd/kubectl-fence into a directory of its own, to put on
// PATH as kubectl's plugin.
func kubectlFenceBinary(t *testing.T, ctx context.Context) string {
	t.Helper()
	bin, err := BuildKubectlFence(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// onCallKubeconfig is a kubeconfig of a new person: a ServiceAccount with the chart's
// on-call ClusterRole, its Role on the pause ConfigMap, and a read of the controller's
// Leases and pods (what `kubectl fence status` shows); not of its Deployments.
func onCallKubeconfig(t *testing.T, ctx context.Context, c *Cluster, name string) string {
	t.Helper()
	cs := c.Client
	if _, err := cs.CoreV1().ServiceAccounts(Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: Namespace}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-" + name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubefence-oncall"}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "test-" + name, Namespace: ControllerNamespace}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"kubefence-pause"}, Verbs: []string{"get", "patch", "update"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}
	if _, err := cs.RbacV1().Roles(ControllerNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ControllerNamespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tokenKubeconfig(t, c, tr.Status.Token)
}

// TestKubectlFence runs the built `kubectl fence` plugin as an on-call person (a
// ServiceAccount with the chart's roles, under the chart's admission policies) against a
// real API server with a leading controller (decisions only): status, pause and resume,
// a fence request, history, timeline, a confirm-off the leader refuses (the node lives)
// and a cancel that ends the incident, each checked through the API. Every word carries
// the person's name as the API server knows it. The leader answers its devices' last
// reads on its answer socket (fence-controller devices, a row of each ipmi_sim BMC it
// read); status, which asks for them by exec, says without the exec grant that they need
// it, and with it that the leader did not answer, still exiting 0. explain, check and
// status's devices exec in the leader's pod, which needs a kubelet that runs containers:
// test/realnode's to cover; pkg/kubectlfence's tests cover the leader pod and the command.
func TestKubectlFence(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	plugin := kubectlFenceBinary(t, ctx)
	h := fastHarnessWith(t, ctx, HarnessOptions{
		Cluster: func(o *Options) { o.Authorization = "Node,RBAC" },
		Config:  func(c *v1alpha1.Config) { c.DryRun = true },
	})
	c := h.Cluster
	applyAdmissionPolicies(t, ctx, c)
	applyPeopleRoles(t, ctx, c)
	sock := filepath.Join(t.TempDir(), "answers.sock")
	startLeader(t, ctx, h, "controller", "--answer-socket="+sock)
	leader, err := h.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaderPod, _, _ := strings.Cut(leader, "_")
	kubectlFenceState(t, ctx, c, leaderPod)
	kubeconfig := onCallKubeconfig(t, ctx, c, "kf-oncall")
	user := personName("kf-oncall")
	fence := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, plugin, append(args, "--kubeconfig", kubeconfig)...)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "KUBECONFIG=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl fence %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("kubectl fence %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	mustSay := func(out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("kubectl fence printed no %q:\n%s", w, out)
			}
		}
	}
	// The fence's help lists every command.
	mustSay(fence("--help"), "status", "history NODE", "timeline INCIDENT", "explain NODE", "check [NODE]",
		"pause --reason", "resume", "confirm-off NODE", "cancel INCIDENT", "fence NODE")
	mustSay(fence("status"), "kubefence in kubefence-system", "pod "+leaderPod+" on node node-2", leader,
		"PAUSED:   no", "No open incidents.", "DEVICES:  not shown:", "you may not exec in kubefence-system", "kubefence-ask-leader")
	kubectlFenceDevices(t, ctx, h, sock, leader, fence, mustSay, "kf-oncall")

	kubectlFencePause(t, ctx, c, fence, mustSay, user)
	name := kubectlFenceWords(t, ctx, c, fence, mustSay, user)

	var s kubectlfence.Status
	if err := json.Unmarshal([]byte(fence("status", "-o", "json")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Leader == nil || s.Leader.Identity != leader || len(s.Incidents) != 0 {
		t.Errorf("status -o json after the cancel of %s: %+v", name, s)
	}
}

// kubectlFenceState makes what the plugin reads beside the leader: its pod (the Lease
// holder's host name) on node-2, and the chart's pause ConfigMap with no request.
func kubectlFenceState(t *testing.T, ctx context.Context, c *Cluster, leaderPod string) {
	t.Helper()
	cs := c.Client
	ns := ControllerNamespace
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: leaderPod, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: "node-2", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "controller", Image: "kubefence/kubefence"}}}}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, pauseConfigMap(nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// kubectlFencePause: pause writes the request in the person's name; resume lifts it.
func kubectlFencePause(t *testing.T, ctx context.Context, c *Cluster, fence func(...string) string, mustSay func(string, ...string), user string) {
	t.Helper()
	pauseData := func() map[string]string {
		t.Helper()
		cm, err := c.Client.CoreV1().ConfigMaps(ControllerNamespace).Get(ctx, "kubefence-pause", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data
	}
	fence("pause", "--reason", "firmware on rack 3", "--name", "patch-night")
	if got, want := pauseData()["patch-night"], user+": firmware on rack 3"; got != want {
		t.Errorf("pause request %q, want %q", got, want)
	}
	mustSay(fence("status"), "PAUSED:   yes, 1 request", "patch-night", user+": firmware on rack 3")
	fence("resume", "--name", "patch-night")
	if data := pauseData(); len(data) != 0 {
		t.Errorf("pause requests after resume: %v", data)
	}
}

// requested is the incident name `kubectl fence fence` prints.
var requested = regexp.MustCompile(`incident (\S+) requested by`)

// kubectlFenceWords: a fence request in the person's name, its history and timeline, a
// confirm-off the leader refuses (the node renews) and a cancel that ends it. It returns
// the incident's name.
func kubectlFenceWords(t *testing.T, ctx context.Context, c *Cluster, fence func(...string) string, mustSay func(string, ...string), user string) string {
	t.Helper()
	m := requested.FindStringSubmatch(fence("fence", runbookNode, "--reason", "BMC path repaired"))
	if m == nil {
		t.Fatal("kubectl fence fence printed no incident")
	}
	name := m[1]
	nf := waitIncident(t, ctx, c, runbookNode, "Held", func(nf *v1alpha1.NodeFence) bool {
		return nf.Name == name && nf.Status.Phase == v1alpha1.PhaseHeld
	})
	if nf.Spec.RequestedBy != user || nf.Spec.Reason != "BMC path repaired" {
		t.Errorf("the request %s: %+v, want requested by %s", name, nf.Spec, user)
	}
	mustSay(fence("history", runbookNode), name, "Held", user)
	mustSay(fence("timeline", name), "STEP", nf.Status.Timeline[0].Type)
	mustSay(fence("status"), name, runbookNode, "Held")

	mustSay(fence("confirm-off", runbookNode, "--reason", "chassis lost power"), name, user)
	nf = waitIncident(t, ctx, c, runbookNode, "refused the confirm-off", func(nf *v1alpha1.NodeFence) bool {
		return hasStep(nf, v1alpha1.StepWordRefused, "is alive")
	})
	if nf.Annotations[v1alpha1.ConfirmOffByAnnotation] != user || nf.Status.Verified() {
		t.Errorf("confirm-off: annotations %v, verified %v", nf.Annotations, nf.Status.Verified())
	}
	mustSay(fence("timeline", name), v1alpha1.StepWordRefused)

	fence("cancel", name, "--reason", "coming back after the switch repair")
	nf = waitIncident(t, ctx, c, runbookNode, "Cancelled", func(nf *v1alpha1.NodeFence) bool {
		return nf.Status.Phase == v1alpha1.PhaseCancelled
	})
	if nf.Annotations[v1alpha1.CancelByAnnotation] != user {
		t.Errorf("cancel-by %q, want %q", nf.Annotations[v1alpha1.CancelByAnnotation], user)
	}
	mustSay(fence("history", runbookNode), name, "Cancelled")
	return name
}

// kubectlFenceDevices: the leader on sock answers fence-controller devices with a row of
// each node's ipmi_sim BMC, once its first round of reads ended; the person granted
// pods/exec as the runbooks grant it, status asks the leader by exec, which the sim's
// kubelets do not run, and says the leader did not answer, exiting 0.
func kubectlFenceDevices(t *testing.T, ctx context.Context, h *Harness, sock, leader string, fence func(...string) string, mustSay func(string, ...string), person string) {
	t.Helper()
	var out []byte
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		out, err = exec.CommandContext(ctx, filepath.Join(h.bin, "fence-controller"), "devices", "--answer-socket", sock).CombinedOutput()
		return err == nil && regexp.MustCompile(`(?m)^node-1 +ipmi +\S+ +on `).Match(out), nil
	})
	t.Logf("fence-controller devices:\n%s", out)
	if err != nil {
		t.Fatalf("the leader answered no read of node-1's BMC: %v", err)
	}
	mustSay(string(out), "answered:  by the leader "+leader+"; its last round of reads ended",
		"NODE", "IDENTITY", "READ", "LATENCY", "node-2", "node-3")

	cs := h.Cluster.Client
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-ask-leader", Namespace: ControllerNamespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"get", "create"}}}}
	if _, err := cs.RbacV1().Roles(ControllerNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ControllerNamespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: person, Namespace: Namespace}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var status string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		status = fence("status")
		return strings.Contains(status, "DEVICES:  not shown: the leader did not answer"), nil
	})
	if err != nil {
		t.Fatalf("status with the exec grant:\n%s", status)
	}
}
