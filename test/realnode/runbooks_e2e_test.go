package realnode

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/sim"
)

// runbookPerson is the user the runbooks' exec grant names (PERSON).
const runbookPerson = "jane@example.com"

// goneNode is the runbooks' OLDNODE: a Node object whose machine is gone for good (no
// kubelet ever runs for it).
const goneNode = "node-gone"

// nodeAgentBlock: a block of docs/runbooks.md that reads the node agents' reports or
// pods. Those run where the chart's node agents do (TestWatchdogDeviceOnRealNodes); every
// other block runs in runbooksRound. Between them, every block runs.
func nodeAgentBlock(block string) bool {
	return strings.Contains(block, "kubefence-node-NODE") || strings.Contains(block, "component=node-agent")
}

// runbookBlocks are docs/runbooks.md's blocks for which keep holds, in the doc's order.
// A command the text tells of that no block runs fails the test.
func runbookBlocks(t *testing.T, keep func(string) bool) []string {
	t.Helper()
	r, err := sim.ReadRunbooks()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Untold) > 0 {
		t.Fatalf("docs/runbooks.md tells of commands that no block runs: %q", r.Untold)
	}
	var blocks []string
	for _, b := range r.Blocks {
		if keep(b) {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) == 0 {
		t.Fatal("no block of docs/runbooks.md to run")
	}
	return blocks
}

// requested is the incident `kubectl fence fence` printed it opened.
var requested = regexp.MustCompile(`incident (\S+) requested by`)

// runbooksRound runs every block of docs/runbooks.md but the node agents' (nodeAgentBlock)
// as written, in the doc's order, as the cluster's admin, on the installed release of
// TestFencingOnRealNodes (two datacenters: AGENT is the second one's remote agent). Each
// block must exit 0. The situation is the alerts' as far as it can be made without
// fencing a healthy node: fencing is paused (the plugin's pause, seen by the leader), NAME
// is a person's request for NODE, a healthy node that is neither the leader's nor the
// remote agent's, held by the pause; OLDNODE is a Node whose machine is gone, with its
// request OLDNAME, made when the doc comes to it. The blocks cordon, drain and uncordon
// NODE, ask for more fences of it, force NAME, confirm NODE off (refused: its kubelet
// renews), cancel NAME, pause and resume, exclude NODE, delete OLDNODE and cancel OLDNAME.
// Afterwards NAME is Cancelled with the refused confirm-off in its timeline, OLDNAME
// Recovered (Decommissioned), and NODE's BMC logged no power-off. The test then cancels
// what the blocks asked for, lifts its pause, and lets NODE run pods again.
func runbooksRound(t *testing.T, ctx context.Context, c *Cluster, p *onCall) {
	t.Helper()
	leader := leaderNode(t, ctx, c)
	agentNode := remoteAgentPod(t, ctx, c).Spec.NodeName
	node := otherThan(c, leader)
	for _, n := range c.Nodes() {
		if n.Name != leader && n.Name != agentNode {
			node = n.Name
		}
	}
	began := time.Now()
	p.run(t, ctx, c, true, 0, `kubectl fence pause --name runbooks --reason "the runbooks, run as written"`)
	waitFor(t, ctx, "the leader's explain of "+node+" paused", func() (bool, error) {
		_, out, code := p.try(t, ctx, c, true, "kubectl fence explain "+node)
		if code != 0 || !strings.Contains(out, "paused:") {
			return false, fmt.Errorf("exit code %d: %s", code, out)
		}
		return true, nil
	})
	name := request(t, ctx, c, p, node)
	values := map[string]string{"NODE": node, "NAME": name, "NAMESPACE": remoteNamespace, "AGENT": remoteAgent, "PERSON": runbookPerson}
	var all strings.Builder
	blocks := runbookBlocks(t, func(b string) bool { return !nodeAgentBlock(b) })
	for _, b := range blocks {
		if _, made := values["OLDNAME"]; !made && (strings.Contains(b, "OLDNODE") || strings.Contains(b, "OLDNAME")) {
			if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: goneNode}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			values["OLDNODE"], values["OLDNAME"] = goneNode, request(t, ctx, c, p, goneNode)
		}
		all.WriteString(p.run(t, ctx, c, true, 0, fill(t, b, values)))
	}
	t.Logf("ran %d blocks of docs/runbooks.md on %s (NAME %s, OLDNAME %s)", len(blocks), node, name, values["OLDNAME"])
	lease, err := c.Client.CoordinationV1().Leases(Namespace).Get(ctx, controllerName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("the leader Lease %s: %v", controllerName, err)
	}
	mustContain(t, "the runbooks' commands", all.String(), "MESSAGE", "paused:", "partition under investigation",
		Fullname+"-agent-"+remoteAgent, *lease.Spec.HolderIdentity,
		// kubectl fence status: the leader's last reads of the devices.
		"DEVICES:\nanswered:  by the leader "+*lease.Spec.HolderIdentity+"; its last round of reads ended", "(matches the node's)")

	nf := incidentNamed(t, ctx, c, node, name)
	refused := slices.ContainsFunc(nf.Status.Timeline, func(s v1alpha1.Step) bool { return s.Type == v1alpha1.StepWordRefused })
	if nf.Status.Phase != v1alpha1.PhaseCancelled || !refused || nf.Status.ConfirmedOff != nil {
		t.Errorf("incident %s of %s: phase %s, confirm-off refused %v, confirmedOff %v; want Cancelled, the confirm-off of a renewing node refused",
			name, node, nf.Status.Phase, refused, nf.Status.ConfirmedOff)
	}
	old := incidentNamed(t, ctx, c, goneNode, values["OLDNAME"])
	if old.Status.Phase != v1alpha1.PhaseRecovered {
		t.Errorf("incident %s of the node gone for good: %s, want Recovered (Decommissioned)", old.Name, old.Status.Phase)
	}
	if off := bmcOffsSince(t, c.BMC(node), began); off != 0 {
		t.Fatalf("the runbooks' commands, with fencing paused, powered %s off %d times", node, off)
	}
	closeRequests(t, ctx, c, p, node)
	p.run(t, ctx, c, true, 0, "kubectl fence resume --name runbooks\nkubectl uncordon "+node+"\nkubectl label node "+node+" fencing.kubefence.io/exclude-")
	revokeAskLeader(t, ctx, c, p)
}

// request asks, as the cluster's admin, for node to be fenced, waits until the leader
// holds the incident, and returns its name.
func request(t *testing.T, ctx context.Context, c *Cluster, p *onCall, node string) string {
	t.Helper()
	out := p.run(t, ctx, c, true, 0, `kubectl fence fence `+node+` --reason "runbooks: a request while fencing is paused"`)
	m := requested.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("kubectl fence fence printed no incident: %s", out)
	}
	waitFor(t, ctx, "incident "+m[1]+" Held", func() (bool, error) {
		if nf := incidentNamed(t, ctx, c, node, m[1]); nf.Status.Phase != v1alpha1.PhaseHeld {
			return false, fmt.Errorf("phase %q", nf.Status.Phase)
		}
		return true, nil
	})
	return m[1]
}

// closeRequests cancels node's incidents the blocks left open (their requests for it),
// and waits until none is open.
func closeRequests(t *testing.T, ctx context.Context, c *Cluster, p *onCall, node string) {
	t.Helper()
	waitFor(t, ctx, "no open incident of "+node, func() (bool, error) {
		nfs, err := c.NodeFences(ctx, node)
		if err != nil {
			return false, err
		}
		var open []string
		for _, u := range nfs {
			if ph := phaseOf(u); ph != string(v1alpha1.PhaseCancelled) && ph != string(v1alpha1.PhaseRecovered) && ph != string(v1alpha1.PhaseFailed) {
				open = append(open, u.GetName()+" "+ph)
				if u.GetAnnotations()[v1alpha1.CancelAnnotation] == "" {
					p.run(t, ctx, c, true, 0, "kubectl fence cancel "+u.GetName()+` --reason "runbooks: done"`)
				}
			}
		}
		if len(open) > 0 {
			return false, fmt.Errorf("open: %v", open)
		}
		return true, nil
	})
}

// incidentNamed is node's incident name.
func incidentNamed(t *testing.T, ctx context.Context, c *Cluster, node, name string) *v1alpha1.NodeFence {
	t.Helper()
	nfs, err := c.NodeFences(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range nfs {
		if u.GetName() == name {
			var nf v1alpha1.NodeFence
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &nf); err != nil {
				t.Fatal(err)
			}
			return &nf
		}
	}
	t.Fatalf("no NodeFence %s of %s", name, node)
	return nil
}
