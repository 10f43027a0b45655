package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/hack/images/imagebuild"
	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/sim"
)

// startCluster starts n real nodes for one test and stops them when it ends; the
// cluster's files stay under the test's temporary directory, and its logs are listed
// when the test fails. set, if given, changes the options (the kubelets' periods).
func startCluster(t *testing.T, n int, set ...func(*Options)) *Cluster {
	t.Helper()
	// A short directory: unix socket paths under it (containerd's, the kubelet's plugin
	// registration) must stay within 108 bytes.
	dir, err := os.MkdirTemp("", "kfrn")
	if err != nil {
		t.Fatal(err)
	}
	var c *Cluster
	t.Cleanup(func() {
		if c != nil {
			if err := c.Stop(); err != nil {
				t.Errorf("stop cluster: %v", err)
			}
		}
		if t.Failed() {
			// 0700: the copy holds the BMC passwords and the cluster's keys.
			if keep, err := os.MkdirTemp("", "kubefence-realnode-failed-"); err == nil {
				t.Logf("cluster files kept in %s (%v)", keep, copyRegular(dir, keep))
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove cluster files: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opts := Options{Dir: dir, Nodes: n, Logf: t.Logf}
	for _, f := range set {
		f(&opts)
	}
	if c, err = Start(ctx, opts); err != nil {
		t.Fatal(err)
	}
	return c
}

// copyRegular copies the regular files and directories under src into dst (sockets and
// the like are left out).
func copyRegular(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o700)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			return os.WriteFile(target, b, 0o600)
		}
		return nil
	})
}

// install builds and pushes the image, then installs the chart with its defaults.
func install(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	out, err := c.Install(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("images and helm install:\n%s", out)
}

// leaderNode is the node of the replica that holds the leader Lease.
func leaderNode(t *testing.T, ctx context.Context, c *Cluster) string {
	t.Helper()
	n, err := c.LeaderNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor is WaitFor, failing the test when ctx ends first.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	if err := WaitFor(ctx, what, cond); err != nil {
		t.Fatal(err)
	}
}

// TestFencingOnRealNodes is a user's story on three real nodes, one cluster throughout:
//
//   - kubefence installed as a release is: make release of this tree into the cluster's
//     registry (the multi-arch image index with its SBOMs, the chart as an OCI artifact;
//     the arm64 image's binaries run under qemu-aarch64-static), then helm install of the
//     released chart with only the image's registry set (and the BMC Secret and node
//     annotations of getting-started);
//   - with a second datacenter (getting-started §4): node-2 and node-3 are its nodes,
//     fenced through a remote agent in its own namespace, with mutual TLS from the
//     Secrets that §4's openssl and kubectl commands make, run as written;
//   - a StatefulSet pod with a single-attach CSI volume, attached by Kubernetes' own
//     path (KCM's attach-detach controller, the external-attacher);
//   - rounds: its node in the second datacenter dies (every process at once, BMC still
//     on) and is fenced through the remote agent with the default remediation; then,
//     after a helm upgrade to a new image tag and the chart's one datacenter, with
//     OutOfServiceTaint only; with Direct only, its node hangs (frozen), then the
//     leader's own node dies; last, a node dies with its BMC unreachable and a person on
//     call drives the incident through kubectl fence and the runbooks (onCallRound);
//   - between the first two rounds, while the second datacenter's remote agent runs,
//     every block of docs/runbooks.md runs as written (runbooksRound).
//
// In every other round kubefence powers the node off through ipmi_sim with the image's agent;
// the pod starts on another node only after that power-off, and the volume is detached
// from the dead node only after it too; powered on again, the node comes back with a new
// boot ID, is released and runs pods. At the end helm uninstall leaves what the docs say.
func TestFencingOnRealNodes(t *testing.T) {
	c := startCluster(t, 3)
	// The bound covers make release, which compiles the arm64 binaries (minutes on a
	// cold build cache), and the rounds.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	installTwoDatacenters(t, ctx, c, func(values string) (string, error) { return installRelease(t, ctx, c, values) })
	if err := c.CreateVolume(ctx, "web-data", "default", "data-web-0"); err != nil {
		t.Fatal(err)
	}
	first := otherThan(c, leaderNode(t, ctx, c))
	if _, err := c.Client.AppsV1().StatefulSets("default").Create(ctx, StatefulSet("web", first), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rounds := []struct {
		name     string
		upgrade  []string // helm upgrade arguments before the round
		strategy string   // the remediation the NodeFence must record
		hang     bool
		leader   bool
		remote   bool // a node of the second datacenter, through its remote agent
		onCall   bool // its BMC answers nothing: a person on call confirms it off (onCallRound)
		runbooks bool // no node dies: every runbook runs as written (runbooksRound)
	}{
		{name: "dead node in the second datacenter, through its remote agent", strategy: "Both", remote: true},
		{name: "every runbook as written, with the second datacenter's remote agent", runbooks: true},
		{name: "dead node, OutOfServiceTaint after an upgrade to a new chart and tag", strategy: "OutOfServiceTaint", upgrade: []string{
			"--set", "image.tag=" + upgradeTag, "-f", remediationValues(t, "OutOfServiceTaint")}},
		{name: "hung node, Direct", strategy: "Direct", hang: true, upgrade: []string{"--reuse-values", "-f", remediationValues(t, "Direct")}},
		{name: "the leader's node dies", strategy: "Direct", leader: true},
		{name: "its BMC unreachable, a person confirms it off with kubectl fence", onCall: true},
	}
	var fences []string
	for _, r := range rounds {
		if !t.Run(r.name, func(t *testing.T) {
			if r.upgrade != nil {
				upgrade(t, ctx, c, r.upgrade)
			}
			if r.runbooks {
				runbooksRound(t, ctx, c, clusterAdmin(t, ctx, c))
				return
			}
			leader := leaderNode(t, ctx, c)
			target := otherThan(c, leader)
			if r.leader {
				target = leader
			}
			if r.remote {
				target = remoteTarget(t, ctx, c)
			}
			if r.onCall {
				fences = append(fences, onCallRound(t, ctx, c, target))
				return
			}
			fences = append(fences, fenceRound(t, ctx, c, target, r.strategy, r.hang))
			if r.remote {
				checkRemoteFence(t, ctx, c, target)
			}
		}) {
			return
		}
	}
	uninstall(t, ctx, c, fences)
}

// upgradeTag is a second tag of the same image, pushed before the upgrade round.
const upgradeTag = "0.1.0-upgrade"

// remediationValues writes a values file whose one policy releases workloads with
// strategy. Its cooldown is 30s instead of 10m: the rounds fence each of the three nodes
// again within minutes, which the default cooldown rightly holds for a person.
func remediationValues(t *testing.T, strategy string) string {
	p := filepath.Join(t.TempDir(), "values.yaml")
	v := "policies:\n- name: default\n  remediation: " + strategy + "\n  budget: {cooldown: 30s}\n  levels:\n  - agents: [ipmi]\n"
	if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func upgrade(t *testing.T, ctx context.Context, c *Cluster, args []string) {
	t.Helper()
	if slices.Contains(args, "image.tag="+upgradeTag) {
		if err := c.Retag(ctx, ChartImage, imageAppVersion(t), upgradeTag); err != nil {
			t.Fatal(err)
		}
	}
	chart, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(args, "image.tag="+upgradeTag) {
		chart = nextChart(t, chart)
	}
	out, err := c.Helm(ctx, append([]string{"upgrade", Release, chart,
		"-n", Namespace, "--wait", "--timeout", "5m"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm upgrade %v: %s", args, firstLines(out, 4))
	if slices.Contains(args, "image.tag="+upgradeTag) {
		checkCRDField(t, ctx, c, nextField)
		pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && !strings.HasSuffix(p.Spec.Containers[0].Image, ":"+upgradeTag) {
				t.Fatalf("after the upgrade pod %s runs %s, want tag %s", p.Name, p.Spec.Containers[0].Image, upgradeTag)
			}
		}
	}
}

// nextField is the NodeFence spec field that only nextChart's CRD has.
const nextField = "upgradeProbe"

// nextChart copies the chart at dir as the next release would ship it: a new chart
// version whose NodeFence CRD has one more optional spec field, nextField. A helm upgrade
// to it must update the CRD: helm never updates a chart's crds/ directory.
func nextChart(t *testing.T, dir string) string {
	t.Helper()
	next := filepath.Join(t.TempDir(), "kubefence")
	if err := copyRegular(dir, next); err != nil {
		t.Fatal(err)
	}
	// edit replaces the first old after the first after (from the start when empty).
	edit := func(file, after, old, new string) {
		p := filepath.Join(next, file)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		head, rest, ok := strings.Cut(string(b), after)
		if !ok || !strings.Contains(rest, old) {
			t.Fatalf("%s has no %q after %q to change for the next chart version", p, old, after)
		}
		if err := os.WriteFile(p, []byte(head+after+strings.Replace(rest, old, new, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	edit("Chart.yaml", "", "\nversion: ", "\nversion: 99.0.0-next.")
	// The NodeFence CRD's first nodeName property is its spec's, as controller-gen writes it.
	edit("templates/crds.yaml", "name: nodefences.fencing.kubefence.io\n", "\n              nodeName:\n", "\n              "+nextField+
		":\n                description: Only the next chart version's CRD has this field (test/realnode).\n                type: string\n              nodeName:\n")
	return next
}

// checkCRDField reads the NodeFence CRD from the API server and fails unless its spec
// schema has field.
func checkCRDField(t *testing.T, ctx context.Context, c *Cluster, field string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	crd, err := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		Get(ctx, "nodefences.fencing.kubefence.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		props, _, _ := unstructured.NestedMap(v.(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties")
		if _, ok := props[field]; !ok {
			t.Fatalf("after helm upgrade the NodeFence CRD's spec has no %s: the upgrade did not update the CRD (spec fields %d)", field, len(props))
		}
	}
	if len(versions) == 0 {
		t.Fatal("the NodeFence CRD has no versions")
	}
	t.Logf("helm upgrade updated the NodeFence CRD: spec.%s is served", field)
}

// otherThan is the first node that is not node.
func otherThan(c *Cluster, node string) string {
	for _, n := range c.Nodes() {
		if n.Name != node {
			return n.Name
		}
	}
	return ""
}

// fenceRound moves web-0 to target, kills (or freezes) target and checks what happened,
// then powers target on and waits for its incident to be Recovered; it returns the
// round's NodeFence.
func fenceRound(t *testing.T, ctx context.Context, c *Cluster, target, strategy string, hang bool) string {
	t.Helper()
	nf, oldBoot := fenceAndRelease(t, ctx, c, target, strategy, hang)
	powerOnAndRecover(t, ctx, c, target, nf, oldBoot)
	return nf
}

// fenceAndRelease is fenceRound up to the release: target is left off, its incident
// Remediated. It returns the NodeFence and target's boot before it died.
func fenceAndRelease(t *testing.T, ctx context.Context, c *Cluster, target, strategy string, hang bool) (string, string) {
	t.Helper()
	if err := c.MovePod(ctx, "web", target); err != nil {
		t.Fatal(err)
	}
	oldBoot := c.Node(target).BootID()
	f, err := c.Fail(ctx, target, "web", "web-data", hang)
	if f != nil {
		t.Log(f)
	}
	if err != nil {
		t.Fatal(err)
	}
	if hang {
		if pids := c.Node(target).Processes(); len(pids) != 0 {
			t.Fatalf("%s was fenced but processes %v of it still run", target, pids)
		}
	}
	checkAttachments(t, ctx, c, "web-data", f.MovedTo)
	nf := nodeFence(t, ctx, c, target)
	if nf.GetCreationTimestamp().Time.Before(f.Began.Add(-time.Second)) {
		t.Fatalf("%s's newest NodeFence %s is from %s, before this round", target, nf.GetName(), nf.GetCreationTimestamp())
	}
	if step := remediatedStep(nf); !strings.HasPrefix(step, "strategy "+strategy+":") {
		t.Fatalf("NodeFence %s remediated with %q, want strategy %s", nf.GetName(), step, strategy)
	}
	t.Logf("%s released %s after the failure", target, since(f.Began, time.Now()))
	return nf.GetName(), oldBoot
}

// powerOnAndRecover powers target on, as its BMC's owner would, and waits for its
// incident nf to be Recovered and a pod to run on it again.
func powerOnAndRecover(t *testing.T, ctx context.Context, c *Cluster, target, nf, oldBoot string) {
	t.Helper()
	if err := c.PowerOn(ctx, target, oldBoot); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "NodeFence "+nf+" Recovered", func() (bool, error) {
		nfs, err := c.NodeFences(ctx, target)
		return err == nil && len(nfs) > 0 && nfs[len(nfs)-1].GetName() == nf && phaseOf(nfs[len(nfs)-1]) == "Recovered", err
	})
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "back-" + nf, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: target, TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "app", Image: BusyboxImage, Command: []string{"/bin/sh", "-c", "sleep 3600"}}}}}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "a pod running on "+target+" again", func() (bool, error) {
		return c.RunningPod(ctx, "default", probe.Name) != nil, nil
	})
	// The probe said what it had to; a pod no controller manages would stop a drain.
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, probe.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "pod "+probe.Name+" gone", func() (bool, error) {
		_, err := c.Client.CoreV1().Pods("default").Get(ctx, probe.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}

// remediatedStep is the message of the NodeFence's Remediated timeline step.
func remediatedStep(nf unstructured.Unstructured) string {
	steps, _, _ := unstructured.NestedSlice(nf.Object, "status", "timeline")
	for _, s := range steps {
		m, _ := s.(map[string]any)
		if m["type"] == v1alpha1.StepRemediated {
			msg, _ := m["message"].(string)
			return msg
		}
	}
	return ""
}

// checkAttachments: the only VolumeAttachment of vol is on node, and attached.
func checkAttachments(t *testing.T, ctx context.Context, c *Cluster, vol, node string) {
	t.Helper()
	waitFor(t, ctx, "one attached VolumeAttachment of "+vol+" on "+node, func() (bool, error) {
		vas, err := c.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var on []string
		ok := false
		for _, va := range vas.Items {
			if va.Spec.Source.PersistentVolumeName == nil || *va.Spec.Source.PersistentVolumeName != vol {
				continue
			}
			on = append(on, va.Spec.NodeName)
			ok = va.Spec.NodeName == node && va.Status.Attached
		}
		return ok && len(on) == 1, fmt.Errorf("attachments of %s: %v", vol, on)
	})
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "; ")
}

// imageAppVersion is the chart's appVersion, the tag install pushed.
func imageAppVersion(t *testing.T) string {
	root, err := sim.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	v, err := imagebuild.ChartAppVersion(filepath.Join(root, imagebuild.ChartFile))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// nodeFence is node's newest NodeFence; the test fails when there is none.
func nodeFence(t *testing.T, ctx context.Context, c *Cluster, node string) unstructured.Unstructured {
	t.Helper()
	nfs, err := c.NodeFences(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if len(nfs) == 0 {
		t.Fatalf("no NodeFence for %s", node)
	}
	return nfs[len(nfs)-1]
}

func phaseOf(nf unstructured.Unstructured) string {
	p, _, _ := unstructured.NestedString(nf.Object, "status", "phase")
	return p
}

// uninstall removes the release and checks what stays, as getting-started documents: the
// CRD with every NodeFence (fences names them), the leader Lease and the credential
// Secret; no pod, no replica's identity Lease.
func uninstall(t *testing.T, ctx context.Context, c *Cluster, fences []string) {
	t.Helper()
	out, err := c.Helm(ctx, "uninstall", Release, "-n", Namespace, "--wait", "--timeout", "5m")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm uninstall: %s", firstLines(out, 2))
	waitFor(t, ctx, "the controller's pods gone", func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, err
	})
	left := map[string]bool{}
	for _, n := range c.Nodes() {
		nfs, err := c.NodeFences(ctx, n.Name)
		if err != nil {
			t.Fatalf("after uninstall the NodeFences cannot be listed: %v", err)
		}
		for _, nf := range nfs {
			left[nf.GetName()] = true
		}
	}
	for _, f := range fences {
		if !left[f] {
			t.Errorf("NodeFence %s is gone after uninstall; the history must stay", f)
		}
	}
	all := len(left)
	if _, err := c.Client.CoordinationV1().Leases(Namespace).Get(ctx, controllerName, metav1.GetOptions{}); err != nil {
		t.Errorf("the leader Lease, which uninstall leaves on purpose: %v", err)
	}
	if _, err := c.Client.CoreV1().Secrets(Namespace).Get(ctx, BMCSecret, metav1.GetOptions{}); err != nil {
		t.Errorf("the BMC Secret, which the user created: %v", err)
	}
	waitFor(t, ctx, "no identity Lease left", func() (bool, error) {
		leases, err := c.Client.CoordinationV1().Leases(Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var names []string
		for _, l := range leases.Items {
			if l.Name != controllerName {
				names = append(names, l.Name)
			}
		}
		return len(names) == 0, fmt.Errorf("leases left: %v", names)
	})
	t.Logf("after uninstall: %d NodeFences, the leader Lease and the Secret remain", all)
}
