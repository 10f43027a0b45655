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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/policy"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// previousRelease is the release before this tree; CHANGELOG.md names its commit.
const previousRelease = "v0.1.0"

// slowBMC is how long the BMC of TestUpgradeAndRollbackWithIncidentsOpen's Fencing node
// takes to cut the power after it acknowledged an off: longer than the upgrade's rollout,
// so that a leader of the new release takes the incident up while the off is pending.
// upgradeValues states it (plus a margin) as the agent's offDelay, as a user of such BMCs
// must.
const slowBMC = 150 * time.Second

// The upgrade test's nodes: the controller's replicas run on node-1 and node-2 (a
// nodeSelector on controllerLabel), and the incidents are on the other three.
const (
	controllerLabel = "kubefence.example/controller"
	releasedNode    = "node-3"
	heldNode        = "node-4"
	fencingNode     = "node-5"
)

// upgradeValues are the values both releases are installed with: the ipmi agent with the
// BMCs' off delay, and a budget that lets three of the five nodes be down at once (one
// released, one held under maintenance, one being fenced).
func upgradeValues(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "values.yaml")
	v := fmt.Sprintf(`agents:
- name: ipmi
  binary: fence-agent-ipmi
  params: {cipherSuite: "3"}
  secret: %s
  target: {annotation: %s}
  timeout: 30s
  offDelay: %s
controller:
  nodeSelector: {%s: "true"}
policies:
- name: default
  budget: {maxUnhealthy: 3, cooldown: 30s}
  levels:
  - agents: [ipmi]
`, BMCSecret, BMCAnnotation, slowBMC+5*time.Second, controllerLabel)
	if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUpgradeAndRollbackWithIncidentsOpen installs the previous release (make release from
// the commit CHANGELOG.md names for it) on five real nodes, and opens three incidents on
// the three that run no controller replica: one Remediated (fenced, released, its node
// left off), one Held (a node cordoned, drained and down: maintenance) and one Fencing
// (its off acknowledged by a BMC that acts slowBMC later). It then upgrades to this tree
// with helm upgrade, whose leader takes the Fencing incident up before the off lands
// (TakenUp), and rolls back with helm rollback. Each incident goes on exactly once across both: one off per fenced
// node's BMC and none for the held one, one NodeFence per node, nothing recovered while
// its node is off, and after the rollback the previous release recovers the fenced nodes
// when they are powered on and ends the held incident when its node boots.
func TestUpgradeAndRollbackWithIncidentsOpen(t *testing.T) {
	c := startCluster(t, 5, func(o *Options) { o.BMCOffDelay = map[string]time.Duration{fencingNode: slowBMC} })
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	values := upgradeValues(t)
	for _, n := range []string{"node-1", "node-2"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, controllerLabel)
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	old, err := c.MakePreviousRelease(ctx, previousRelease)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("make release %s from its commit took %s: %s@%s", old.Version, old.Took.Round(time.Second), old.Image, old.Digest)
	if out, err := c.InstallRelease(ctx, old, releaseMirror, values); err != nil {
		t.Fatalf("install %s: %v\n%s", previousRelease, err, out)
	}
	oldImage := fmt.Sprintf("%s/%s:%s@%s", releaseMirror, old.Repository, old.ChartVersion, old.Digest)
	waitFor(t, ctx, "the controller's pods Ready with "+oldImage, func() (bool, error) { return controllerPodsReady(ctx, c, oldImage) })

	if free := nodesWithoutController(t, ctx, c); !slices.Equal(free, []string{releasedNode, heldNode, fencingNode}) {
		t.Fatalf("nodes without a controller replica: %v, want %s, %s and %s", free, releasedNode, heldNode, fencingNode)
	}
	released, held, fencing := releasedNode, heldNode, fencingNode
	if err := c.CreateVolume(ctx, "web-data", "default", "data-web-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().StatefulSets("default").Create(ctx, StatefulSet("web", released), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Remediated: fenced, released, left off.
	nfReleased, releasedBoot := fenceAndRelease(t, ctx, c, released, "Both", false)
	// Held: a patch night's reboot that outlasts detection. Fencing: the off
	// acknowledged, the power still on for slowBMC. Both nodes go down together and are
	// detected side by side.
	setUnschedulable(t, ctx, c, held, true)
	drain(t, ctx, c, held)
	heldBoot, fencingBoot := c.Node(held).BootID(), c.Node(fencing).BootID()
	for _, n := range []string{held, fencing} {
		if err := c.Crash(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	nfHeld := waitIncident(t, ctx, c, held, func(nf unstructured.Unstructured) bool {
		return phaseOf(nf) == string(v1alpha1.PhaseHeld) && lastHold(nf) == policy.ReasonMaintenance
	}, "Held for maintenance")
	waitFor(t, ctx, "the BMC of "+fencing+" acknowledging an off", func() (bool, error) {
		return offs(t, c, fencing, bmc.ActionOffRequested) == 1, nil
	})
	nfFencing := waitIncident(t, ctx, c, fencing, func(nf unstructured.Unstructured) bool { return phaseOf(nf) == string(v1alpha1.PhaseFencing) }, "Fencing")

	upgradeToThisTree(t, ctx, c, values)
	checkGoesOnOnce(t, ctx, c, "after the upgrade", map[string]string{released: nfReleased, held: nfHeld, fencing: nfFencing}, held)
	t.Logf("the timeline of %s (Fencing at the upgrade) after it:\n%s", nfFencing, timeline(t, ctx, c, fencing))
	checkTakenUpBeforeVerified(t, ctx, c, fencing)

	out, err := c.Helm(ctx, "rollback", Release, "1", "-n", Namespace, "--wait", "--timeout", "5m")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm rollback %s 1: %s", Release, firstLines(out, 2))
	waitFor(t, ctx, "the controller's pods Ready with "+oldImage+" again", func() (bool, error) { return controllerPodsReady(ctx, c, oldImage) })
	checkGoesOnOnce(t, ctx, c, "after the rollback", map[string]string{released: nfReleased, held: nfHeld, fencing: nfFencing}, held)

	// The previous release carries each incident to its end.
	powerOnAndRecover(t, ctx, c, released, nfReleased, releasedBoot)
	powerOnAndRecover(t, ctx, c, fencing, nfFencing, fencingBoot)
	if err := c.Node(held).boot(ctx); err != nil {
		t.Fatal(err)
	}
	waitIncident(t, ctx, c, held, func(nf unstructured.Unstructured) bool {
		return nf.GetName() == nfHeld && !v1alpha1.Phase(phaseOf(nf)).Open()
	}, "ended, "+held+" back on a new boot (was "+heldBoot+")")
	for _, node := range []string{released, held, fencing} {
		t.Logf("the timeline of %s's incident at its end:\n%s", node, timeline(t, ctx, c, node))
	}
	for node, want := range map[string]int{released: 1, fencing: 1, held: 0} {
		if got := offs(t, c, node, bmc.ActionOff); got != want {
			t.Errorf("the BMC of %s cut the power %d times, want %d", node, got, want)
		}
		if got := offRequests(t, c, node); got != want {
			t.Errorf("the BMC of %s was asked to power off %d times, want %d", node, got, want)
		}
	}
}

// upgradeToThisTree pushes this tree's image and upgrades the release to this tree's
// chart with values, as getting-started's Upgrade says (a new chart version: its own
// defaults, the user's values).
func upgradeToThisTree(t *testing.T, ctx context.Context, c *Cluster, values string) {
	t.Helper()
	if _, err := c.PushKubefence(ctx); err != nil {
		t.Fatal(err)
	}
	chart, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Helm(ctx, "upgrade", Release, chart, "-n", Namespace, "-f", values, "--wait", "--timeout", "5m")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm upgrade to this tree: %s", firstLines(out, 2))
	image := ChartImage + ":" + imageAppVersion(t)
	waitFor(t, ctx, "the controller's pods Ready with "+image, func() (bool, error) { return controllerPodsReady(ctx, c, image) })
}

// checkGoesOnOnce: each incident (node → NodeFence) is its node's only one, the fenced
// nodes' incidents reach Remediated with exactly one off each and stay unrecovered while
// their nodes are off, and the held node's incident stays Held with no power request.
func checkGoesOnOnce(t *testing.T, ctx context.Context, c *Cluster, when string, incidents map[string]string, held string) {
	t.Helper()
	for node, name := range incidents {
		want := string(v1alpha1.PhaseRemediated)
		wantOffs := 1
		if node == held {
			want, wantOffs = string(v1alpha1.PhaseHeld), 0
		}
		waitIncident(t, ctx, c, node, func(nf unstructured.Unstructured) bool {
			if got := offRequests(t, c, node); got > wantOffs {
				t.Fatalf("%s: the BMC of %s was asked to power off %d times, want %d", when, node, got, wantOffs)
			}
			return nf.GetName() == name && phaseOf(nf) == want
		}, want+" "+when)
		nfs, err := c.NodeFences(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		if len(nfs) != 1 {
			t.Errorf("%s: %s has %d NodeFences, want its one incident %s", when, node, len(nfs), name)
		}
		if got := offRequests(t, c, node); got != wantOffs {
			t.Errorf("%s: the BMC of %s was asked to power off %d times, want %d", when, node, got, wantOffs)
		}
		if on := offs(t, c, node, bmc.ActionOn); on != 0 {
			t.Errorf("%s: the BMC of %s was powered on %d times while its incident is open", when, node, on)
		}
	}
	t.Logf("%s: each incident went on once", when)
}

// waitIncident waits until node's newest NodeFence satisfies ok and returns its name.
func waitIncident(t *testing.T, ctx context.Context, c *Cluster, node string, ok func(unstructured.Unstructured) bool, what string) string {
	t.Helper()
	var name string
	waitFor(t, ctx, node+"'s incident "+what, func() (bool, error) {
		nfs, err := c.NodeFences(ctx, node)
		if err != nil || len(nfs) == 0 {
			return false, err
		}
		nf := nfs[len(nfs)-1]
		name = nf.GetName()
		return ok(nf), fmt.Errorf("NodeFence %s is %s (hold %q)", name, phaseOf(nf), lastHold(nf))
	})
	return name
}

// offs counts the power events of action in node's BMC log.
func offs(t *testing.T, c *Cluster, node, action string) int {
	t.Helper()
	events, err := c.BMC(node).Events()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		if e.Action == action {
			n++
		}
	}
	return n
}

// offRequests counts the offs node's BMC was asked for: the slow BMC logs each as
// ActionOffRequested (and ActionOff when it acts), the others as ActionOff alone.
func offRequests(t *testing.T, c *Cluster, node string) int {
	t.Helper()
	if node == fencingNode {
		return offs(t, c, node, bmc.ActionOffRequested)
	}
	return offs(t, c, node, bmc.ActionOff)
}

// nodesWithoutController are the nodes no controller pod runs on, sorted.
func nodesWithoutController(t *testing.T, ctx context.Context, c *Cluster) []string {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=controller"})
	if err != nil {
		t.Fatal(err)
	}
	var busy []string
	for _, p := range pods.Items {
		busy = append(busy, p.Spec.NodeName)
	}
	var free []string
	for _, n := range c.Nodes() {
		if !slices.Contains(busy, n.Name) {
			free = append(free, n.Name)
		}
	}
	return free
}

// timeline is node's newest incident's timeline, a step a line: time, type, message (cut
// at 160 characters).
func timeline(t *testing.T, ctx context.Context, c *Cluster, node string) string {
	t.Helper()
	nfs, err := c.NodeFences(ctx, node)
	if err != nil || len(nfs) == 0 {
		t.Fatalf("no NodeFence of %s: %v", node, err)
	}
	steps, _, _ := unstructured.NestedSlice(nfs[len(nfs)-1].Object, "status", "timeline")
	var b strings.Builder
	for _, s := range steps {
		m, _ := s.(map[string]any)
		msg, _ := m["message"].(string)
		fmt.Fprintf(&b, "  %v %v: %.160s\n", m["time"], m["type"], msg)
	}
	return b.String()
}

// checkTakenUpBeforeVerified: a leader of this tree's release took node's incident up
// (its TakenUp step) before the fence was verified: the off pending across the upgrade
// was carried on by the new release, which read it back.
func checkTakenUpBeforeVerified(t *testing.T, ctx context.Context, c *Cluster, node string) {
	t.Helper()
	nfs, err := c.NodeFences(ctx, node)
	if err != nil || len(nfs) == 0 {
		t.Fatalf("no NodeFence of %s: %v", node, err)
	}
	steps, _, _ := unstructured.NestedSlice(nfs[len(nfs)-1].Object, "status", "timeline")
	for _, s := range steps {
		m, _ := s.(map[string]any)
		switch m["type"] {
		case v1alpha1.StepTakenUp:
			t.Logf("%s's incident: %v", node, m["message"])
			return
		case v1alpha1.StepVerified:
			t.Fatalf("%s's incident was verified before a leader of this tree took it up: the upgrade did not hand a pending off over", node)
		}
	}
	t.Fatalf("%s's incident has no TakenUp step: no leader of this tree wrote it", node)
}
