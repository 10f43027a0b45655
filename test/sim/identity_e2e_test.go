package sim

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/podrelease"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// TestMismatchedDeviceHoldsTheFence: each node reports its BMC's GUID as its systemUUID
// (as a machine reads it from SMBIOS). After the leader's first round of device checks,
// two mappings are edited: (a) the node running web-0 now names a powered-off spare BMC
// with a GUID of its own, and (b) another node names a third node's BMC (that node's
// own mapping not yet written, so no two nodes share the target). Then both nodes' kubelets
// die at once, before the next round. The fence agent reads each device's GUID before it
// sends anything: both incidents are held with reason TargetMismatch, naming both
// identities, a TargetMismatch Event is on each node, and nothing is released (web-0
// stays bound, no taint) or powered off (the spare's, the victims' and the third node's
// BMC logs are empty). `fence-controller check` prints the mismatch. Without the agent's
// check, (a) verified "already off, nothing sent" and released a running machine's
// pods, and (b) powered off the healthy third node.
func TestMismatchedDeviceHoldsTheFence(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := fastHarnessWith(t, ctx, HarnessOptions{Nodes: 4, Config: func(c *v1alpha1.Config) {
		for i := range c.Policies {
			all := intstr.FromString("100%")
			c.Policies[i].Budget.MaxUnhealthy = &all // two dead nodes of four are no storm here
		}
	}})
	spare, err := bmc.StartIPMI(ctx, bmc.IPMIOptions{Dir: filepath.Join(t.TempDir(), "spare"), PoweredOn: false})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = spare.Stop() })
	toSpare := deployWeb(t, ctx, h.Cluster)
	var others []string
	for _, n := range []string{"node-1", "node-2", "node-3", "node-4"} {
		if n != toSpare {
			others = append(others, n)
		}
	}
	toOther, healthy := others[0], others[1]
	for _, n := range []string{toSpare, toOther, healthy} {
		node, err := h.Cluster.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil || !strings.EqualFold(node.Status.NodeInfo.SystemUUID, h.BMCs[n].SystemUUID()) {
			t.Fatalf("node %s reports systemUUID %q (%v), want its BMC's %s", n, node.Status.NodeInfo.SystemUUID, err, h.BMCs[n].SystemUUID())
		}
	}

	leader := startLeader(t, ctx, h, "controller")
	metrics := metricsURL(t, ctx, leader)
	waitScrape(t, ctx, metrics, fmt.Sprintf(`kubefence_target_up{agent="ipmi",node="%s"} 1`, toSpare), "the first round of device checks")

	healthyBMC := setAnnotationGet(t, ctx, h, healthy, IPMIAddressKey, "")
	setAnnotation(t, ctx, h, toSpare, IPMIAddressKey, fmt.Sprintf("%s:%d", spare.Host(), spare.Port()))
	setAnnotation(t, ctx, h, toOther, IPMIAddressKey, healthyBMC)
	h.Cluster.Node(toSpare).Crash()
	h.Cluster.Node(toOther).Crash()

	for victim, device := range map[string]string{toSpare: spare.GUID(), toOther: h.BMCs[healthy].GUID()} {
		nf := waitIncidentN(t, ctx, h, victim, 1, func(nf v1alpha1.NodeFence) bool {
			p := nf.Status.Phase
			return p != "" && p != v1alpha1.PhasePending && p != v1alpha1.PhaseFencing
		}, "the hold")
		t.Logf("%s: %s %q", victim, nf.Status.Phase, nf.Status.Message)
		if nf.Status.Phase != v1alpha1.PhaseHeld || !strings.Contains(nf.Status.Message, "TargetMismatch") ||
			!strings.Contains(nf.Status.Message, device) || !strings.Contains(nf.Status.Message, h.BMCs[victim].SystemUUID()) {
			t.Errorf("incident of %s %s %q, want Held for TargetMismatch naming %s and %s", victim, nf.Status.Phase,
				nf.Status.Message, device, h.BMCs[victim].SystemUUID())
		}
		if !holdStep(nf, v1alpha1.ReasonTargetMismatch) {
			t.Errorf("no Hold step with reason %s in %+v", v1alpha1.ReasonTargetMismatch, nf.Status.Timeline)
		}
		waitNodeEvent(t, ctx, h, victim, v1alpha1.ReasonTargetMismatch, device)
	}
	waitScrape(t, ctx, metrics, `kubefence_target_mismatch_total{agent="ipmi"}`, "the mismatch metric")

	// Nothing more is sent while held, nothing released, nothing powered off.
	time.Sleep(5 * time.Second)
	for name, b := range map[string]*bmc.IPMISim{"spare": spare, toSpare: h.BMCs[toSpare], toOther: h.BMCs[toOther], healthy: h.BMCs[healthy]} {
		if events, err := b.Events(); err != nil || len(events) > 0 {
			t.Errorf("BMC of %s logged %v (%v), want nothing asked of it", name, events, err)
		}
	}
	if on, err := h.BMCs[healthy].PoweredOn(); err != nil || !on {
		t.Errorf("the healthy node's BMC reads on=%v (%v)", on, err)
	}
	for _, victim := range []string{toSpare, toOther} {
		if keys := taintKeys(t, ctx, h.Cluster, victim); slices.Contains(keys, podrelease.FencedTaint.Key) || slices.Contains(keys, podrelease.OutOfServiceTaint.Key) {
			t.Errorf("node %s was released: taints %v", victim, keys)
		}
	}
	if n, err := nodeOfPod(ctx, h.Cluster, "web-0"); err != nil || n != toSpare {
		t.Errorf("web-0 is on %q (%v), want still bound to %s", n, err, toSpare)
	}
	checkPrintsMismatch(t, ctx, h, toSpare, spare.GUID())
}

// setAnnotationGet sets node's annotation key as setAnnotation does and returns the value
// it had.
func setAnnotationGet(t *testing.T, ctx context.Context, h *Harness, node, key, value string) string {
	t.Helper()
	n, err := h.Cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setAnnotation(t, ctx, h, node, key, value)
	return n.Annotations[key]
}

func waitScrape(t *testing.T, ctx context.Context, metrics, line, what string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return strings.Contains(scrape(ctx, metrics), line), nil
	})
	if err != nil {
		t.Fatalf("%s: /metrics never showed %s", what, line)
	}
}

func holdStep(nf v1alpha1.NodeFence, reason string) bool {
	for _, s := range nf.Status.Timeline {
		if s.Type == v1alpha1.StepHold && strings.HasPrefix(s.Message, reason+":") {
			return true
		}
	}
	return false
}

// waitNodeEvent waits for an Event of reason on node whose message names want.
func waitNodeEvent(t *testing.T, ctx context.Context, h *Harness, node, reason, want string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := h.Cluster.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
			seen = append(seen, e.Message)
			return strings.Contains(e.Message, want)
		}), nil
	})
	if err != nil {
		t.Errorf("no %s Event on node %s naming %s; seen %q", reason, node, want, seen)
	}
}

// checkPrintsMismatch runs `fence-controller check` and wants node's row to say MISMATCH
// with the device's identity.
func checkPrintsMismatch(t *testing.T, ctx context.Context, h *Harness, node, device string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(h.bin, "fence-controller"), "check", "--config", h.ConfigPath, "--kubeconfig", h.Cluster.Kubeconfig)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	_ = cmd.Run() // exits 1: devices are down or mismatched
	t.Logf("fence-controller check:\n%s", out.String())
	want := regexp.MustCompile(`(?m)^` + node + `\s+ipmi\s+\S+\s+error\s+MISMATCH: device ` + device)
	if !want.MatchString(out.String()) {
		t.Errorf("check output lacks %s as %s; stderr %s", node, want, errOut.String())
	}
}
