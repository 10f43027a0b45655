package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/policy"
)

// slowPOST is how long the patched node stays silent at most: a reboot whose firmware POST
// alone takes minutes, as bare-metal servers' do. It boots earlier once its incident has
// stood Held for holdStands: a hold that lasts while the node stays silent past its
// threshold, not one decision.
const (
	slowPOST   = 3 * time.Minute
	holdStands = 45 * time.Second
)

// TestPlannedRebootOnRealNodes is a patch night on three real nodes with the chart's
// defaults. A node is cordoned and drained as docs/runbooks.md's patch procedure says (its
// StatefulSet pod, with its single-attach CSI volume, is evicted and runs elsewhere), then
// every process of it stops, a reboot with a slow POST, for 3 minutes or until its
// incident has been held for 45 s, and it boots again.
// No power request reaches its BMC, its incident (if one opens) is held with reason
// Maintenance and ends when the node is back on a new boot, and nothing of it is
// released. Uncordoned, the same node dies with the pod on it and is fenced as in
// TestFencingOnRealNodes' rounds (fenceRound), and left off: helm uninstall is refused
// until it is powered on and recovered, then goes through as getting-started says
// (uninstallAsDocumented).
//
// It runs on the oldest Kubernetes the chart admits (OldestKubeVersion: control plane and
// kubelets), where the chart installs without the node agent, while the other real-node
// tests run on sim.KubeVersion: between them a dead node is fenced and released on both.
func TestPlannedRebootOnRealNodes(t *testing.T) {
	c := startCluster(t, 3, func(o *Options) { o.KubeVersion = OldestKubeVersion })
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	install(t, ctx, c)
	if err := c.CreateVolume(ctx, "web-data", "default", "data-web-0"); err != nil {
		t.Fatal(err)
	}
	target := otherThan(c, leaderNode(t, ctx, c))
	if _, err := c.Client.AppsV1().StatefulSets("default").Create(ctx, StatefulSet("web", target), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.MovePod(ctx, "web", target); err != nil {
		t.Fatal(err)
	}

	setUnschedulable(t, ctx, c, target, true)
	drain(t, ctx, c, target)
	oldBoot := c.Node(target).BootID()
	if err := c.Crash(ctx, target); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	t.Logf("%s cordoned, drained and down for %s", target, slowPOST)
	var held string
	var heldAt time.Time
	waitFor(t, ctx, target+" silent with no power request and no incident but a maintenance hold, for "+slowPOST.String()+
		" or until the hold stood "+holdStands.String(), func() (bool, error) {
		if msg := plannedOnly(t, ctx, c, target); msg != "" {
			held = msg
			if heldAt.IsZero() {
				heldAt = time.Now()
			}
		}
		return time.Since(down) >= slowPOST || (!heldAt.IsZero() && time.Since(heldAt) >= holdStands), nil
	})
	if err := c.Node(target).boot(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, target+" back on a new boot, with no incident open", func() (bool, error) {
		plannedOnly(t, ctx, c, target)
		n, err := c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
		if err != nil || !nodeReady(n) || n.Status.NodeInfo.BootID == oldBoot {
			return false, err
		}
		nfs, err := c.NodeFences(ctx, target)
		if err != nil {
			return false, err
		}
		for _, nf := range nfs {
			if p := v1alpha1.Phase(phaseOf(nf)); p.Open() {
				return false, fmt.Errorf("NodeFence %s still %s", nf.GetName(), p)
			}
		}
		return true, nil
	})
	if held == "" {
		t.Logf("%s back after %s: no incident opened", target, since(down, time.Now()))
	} else {
		t.Logf("%s back after %s; its incident was held: %s", target, since(down, time.Now()), held)
	}

	// The same node, uncordoned, dies with the pod on it: fenced as any dead node. Left
	// off, its incident open, it is what an uninstall must not leave behind in silence.
	setUnschedulable(t, ctx, c, target, false)
	nf, oldBoot := fenceAndRelease(t, ctx, c, target, "Both", false)
	uninstallAsDocumented(t, ctx, c, target, nf, oldBoot)
}

// plannedOnly fails the test at the first power request to node's BMC or an incident of
// node that is anything but held for maintenance or ended without a fence; it returns the
// message of a maintenance hold, "" when there is none.
func plannedOnly(t *testing.T, ctx context.Context, c *Cluster, node string) string {
	t.Helper()
	events, err := c.BMC(node).Events()
	if err != nil {
		t.Fatal(err)
	}
	if len(events) > 0 {
		t.Fatalf("the BMC of %s, rebooting under maintenance, got power requests: %+v", node, events)
	}
	nfs, err := c.NodeFences(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	held := ""
	for _, nf := range nfs {
		msg, _, _ := unstructured.NestedString(nf.Object, "status", "message")
		switch p := v1alpha1.Phase(phaseOf(nf)); {
		case p == v1alpha1.PhaseHeld && lastHold(nf) == policy.ReasonMaintenance:
			held = msg
		case p == "" || p == v1alpha1.PhasePending:
			// Opened a moment ago; the first decision follows at once.
		case p == v1alpha1.PhaseCancelled && lastHold(nf) == policy.ReasonMaintenance:
		default:
			t.Fatalf("NodeFence %s of %s under maintenance: %s (%q), hold %q", nf.GetName(), node, p, msg, lastHold(nf))
		}
	}
	return held
}

// lastHold is the reason of nf's latest Hold step, "" when it has none.
func lastHold(nf unstructured.Unstructured) string {
	steps, _, _ := unstructured.NestedSlice(nf.Object, "status", "timeline")
	reason := ""
	for _, s := range steps {
		m, _ := s.(map[string]any)
		if m["type"] == v1alpha1.StepHold {
			msg, _ := m["message"].(string)
			reason, _, _ = strings.Cut(msg, ":")
		}
	}
	return reason
}

// setUnschedulable cordons node (kubectl cordon) or uncordons it.
func setUnschedulable(t *testing.T, ctx context.Context, c *Cluster, node string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// drain evicts every pod of node that a DaemonSet does not own, as kubectl drain does
// (through the Eviction API, so disruption budgets are honored), and waits until web-0
// runs on another node.
func drain(t *testing.T, ctx context.Context, c *Cluster, node string) {
	t.Helper()
	waitFor(t, ctx, "every pod evicted from "+node, func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return false, err
		}
		left := 0
		for _, p := range pods.Items {
			if ownedByDaemonSet(&p) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			left++
			ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
			if err := c.Client.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsTooManyRequests(err) {
				return false, err
			}
		}
		return left == 0, fmt.Errorf("%d pods left on %s", left, node)
	})
	waitFor(t, ctx, "web-0 running on another node than "+node, func() (bool, error) {
		p := c.RunningPod(ctx, "default", "web-0")
		return p != nil && p.Spec.NodeName != node, nil
	})
}

func ownedByDaemonSet(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}
