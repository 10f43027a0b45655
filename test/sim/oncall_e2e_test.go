package sim

import (
	"context"
	"encoding/json"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// onCallHarness is fastHarness on an API server that authorizes with RBAC, with the
// chart's people roles and the admission policies of force, confirm-off and cancel
// applied: the words of people with and without the on-call role meet the API server's
// own checks. (The controller runs as cluster admin here; the requestedBy policy lets
// only the chart's ServiceAccount open incidents.)
func onCallHarness(t *testing.T, ctx context.Context, adjust func(*v1alpha1.Config)) *Harness {
	t.Helper()
	h := fastHarnessWith(t, ctx, HarnessOptions{Config: adjust, Cluster: func(o *Options) { o.Authorization = "Node,RBAC" }})
	applyAdmissionPolicies(t, ctx, h.Cluster, "requested-by")
	applyPeopleRoles(t, ctx, h.Cluster)
	return h
}

// say sets annotations on the incident named name as who, and returns the API server's
// answer.
func say(ctx context.Context, who dynamic.Interface, name string, annotations map[string]any) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	_, err := who.Resource(v1alpha1.NodeFenceResource).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// waitIncident polls node's newest incident until ok holds, and returns it.
func waitIncident(t *testing.T, ctx context.Context, c *Cluster, node, what string, ok func(*v1alpha1.NodeFence) bool) *v1alpha1.NodeFence {
	t.Helper()
	var last *v1alpha1.NodeFence
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, c, node)
		if err != nil || len(incs) == 0 {
			return false, nil
		}
		last = &incs[len(incs)-1]
		return ok(last), nil
	})
	if err != nil {
		if last != nil {
			t.Fatalf("incident of %s never %s: phase %s, message %q, timeline %+v", node, what, last.Status.Phase, last.Status.Message, last.Status.Timeline)
		}
		t.Fatalf("incident of %s never %s: no incident", node, what)
	}
	return last
}

func hasStep(nf *v1alpha1.NodeFence, typ, contains string) bool {
	return slices.ContainsFunc(nf.Status.Timeline, func(s v1alpha1.Step) bool {
		return s.Type == typ && strings.Contains(s.Message, contains)
	})
}

// TestConfirmOffReleasesNodeWithDeadBMC: a node and its BMC die together, so every level
// fails and its StatefulSet pod stays stuck. A person without the on-call role cannot
// confirm it off (the API server refuses); an on-call person can, and the node is then
// released as if verified, with the person and reason on record. The same word about a
// node that still renews its Lease is refused and releases nothing.
func TestConfirmOffReleasesNodeWithDeadBMC(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := onCallHarness(t, ctx, func(cfg *v1alpha1.Config) {
		zero := int32(0)
		cfg.Policies[0].Levels[0].Timeout = metav1.Duration{Duration: 3 * time.Second}
		cfg.Policies[0].Levels[0].Retries = &zero
	})
	c := h.Cluster
	victim := deployWeb(t, ctx, c)
	alive := "node-1"
	if victim == alive {
		alive = "node-3"
	}
	for _, n := range []string{victim, alive} {
		if err := h.BMCs[n].Stop(); err != nil {
			t.Fatal(err)
		}
	}
	editor := personWithRole(t, ctx, c, "editor", "kubefence-requester")
	oncall := personWithRole(t, ctx, c, "oncall", "kubefence-oncall")
	startLeader(t, ctx, h, "controller")
	c.Node(victim).Crash()
	failed := waitIncident(t, ctx, c, victim, "Failed", func(nf *v1alpha1.NodeFence) bool { return nf.Status.Phase == v1alpha1.PhaseFailed })
	t.Logf("incident %s of %s failed: %s", failed.Name, victim, failed.Status.Message)

	// A person asks for the live node's fence; its BMC is dead too, so it cannot be
	// verified: an incident that a confirm-off could release.
	req := nodeFenceRequest("ask-"+alive, alive, personName("oncall"), false)
	if _, err := oncall.Resource(v1alpha1.NodeFenceResource).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	asked := waitIncident(t, ctx, c, alive, "Held or Failed", func(nf *v1alpha1.NodeFence) bool {
		return nf.Status.Phase == v1alpha1.PhaseFailed || nf.Status.Phase == v1alpha1.PhaseHeld
	})

	word := func(reason, by string) map[string]any {
		return map[string]any{v1alpha1.ConfirmOffAnnotation: reason, v1alpha1.ConfirmOffByAnnotation: by}
	}
	if err := say(ctx, editor, failed.Name, word("chassis lost power", personName("editor"))); err == nil ||
		!strings.Contains(err.Error(), "nodefences/confirm") {
		t.Fatalf("confirm-off by a person without nodefences/confirm answered %v; want it refused by the admission policy", err)
	} else {
		t.Logf("editor refused: %v", err)
	}

	// Safety: the node renews its Lease, so the word is refused and nothing released.
	if err := say(ctx, oncall, asked.Name, word("I think it is off", personName("oncall"))); err != nil {
		t.Fatalf("on-call's confirm-off refused by the API server: %v", err)
	}
	refused := waitIncident(t, ctx, c, alive, "answered", func(nf *v1alpha1.NodeFence) bool {
		return hasStep(nf, v1alpha1.StepWordRefused, "is alive") || nf.Status.Verified() || nf.Status.Phase == v1alpha1.PhaseRemediated
	})
	if refused.Status.Verified() || len(refused.Status.Remediation.TaintsAdded) > 0 || !hasStep(refused, v1alpha1.StepWordRefused, "is alive") {
		t.Fatalf("confirm-off of live node %s: phase %s, confirmedOff %+v, taints %v: want it refused, nothing released",
			alive, refused.Status.Phase, refused.Status.ConfirmedOff, refused.Status.Remediation.TaintsAdded)
	}
	if n, _ := c.Client.CoreV1().Nodes().Get(ctx, alive, metav1.GetOptions{}); n != nil && len(n.Spec.Taints) > 0 {
		t.Errorf("live node %s was tainted: %v", alive, n.Spec.Taints)
	}

	if err := say(ctx, oncall, failed.Name, word("chassis lost power with its BMC", personName("oncall"))); err != nil {
		t.Fatalf("on-call's confirm-off refused by the API server: %v", err)
	}
	released := waitIncident(t, ctx, c, victim, "Remediated", func(nf *v1alpha1.NodeFence) bool { return nf.Status.Phase == v1alpha1.PhaseRemediated })
	st := released.Status
	if st.ConfirmedOff == nil || st.ConfirmedOff.By != personName("oncall") || st.ConfirmedOff.Reason != "chassis lost power with its BMC" ||
		st.VerifiedLevel != 0 || !hasStep(released, v1alpha1.StepConfirmedOff, personName("oncall")) || len(st.Remediation.PodsDeleted) == 0 {
		t.Errorf("released incident: confirmedOff %+v, verifiedLevel %d, pods %v, timeline %+v", st.ConfirmedOff, st.VerifiedLevel, st.Remediation.PodsDeleted, st.Timeline)
	}
	if cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionFenced); cond == nil || cond.Status != metav1.ConditionTrue ||
		cond.Reason != v1alpha1.ConditionReasonConfirmedOff {
		t.Errorf("Fenced condition %+v, want True with reason ConfirmedOff", cond)
	}
	if released.Name != failed.Name {
		t.Errorf("released %s, want the failed incident %s itself", released.Name, failed.Name)
	}
}

// pauseConfigMap is a pause request as an on-call person writes it.
func pauseConfigMap(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-pause", Namespace: ControllerNamespace,
		Labels: map[string]string{v1alpha1.PauseLabel: "true"}}, Data: data}
}

// TestPauseHoldsAStormLive: two of three nodes die and the storm rule holds both. A
// pause request set then takes effect at the next sync, with no replica restarted: the
// held incidents say who paused and why, and a person's force (which overrides the
// storm) sends nothing. Lifting the pause lets the forced incident fence. Then the
// person's cancel: it ends the other held incident (and no new one opens for the dead
// node), is refused on the fenced one, and closes it once its Node object is gone.
func TestPauseHoldsAStormLive(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := onCallHarness(t, ctx, nil)
	c := h.Cluster
	oncall := personWithRole(t, ctx, c, "oncall", "kubefence-oncall")
	replica := startLeader(t, ctx, h, "controller")
	pids := h.PIDs()
	c.Node("node-2").Crash()
	c.Node("node-3").Crash()
	heldBy := func(node, what string) *v1alpha1.NodeFence {
		return waitIncident(t, ctx, c, node, "held: "+what, func(nf *v1alpha1.NodeFence) bool {
			return nf.Status.Phase == v1alpha1.PhaseHeld && strings.Contains(nf.Status.Message, what)
		})
	}
	heldBy("node-2", "unhealthy")
	heldBy("node-3", "unhealthy")

	cms := c.Client.CoreV1().ConfigMaps(ControllerNamespace)
	pause, err := cms.Create(ctx, pauseConfigMap(map[string]string{"patch-night": "alice: rack 3 firmware"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node-2", "node-3"} {
		nf := heldBy(n, "fencing is paused cluster-wide: patch-night: alice: rack 3 firmware")
		var at time.Time
		for _, s := range nf.Status.Timeline {
			if s.Type == v1alpha1.StepHold && strings.Contains(s.Message, "patch-night") {
				at = s.Time.Time
			}
		}
		t.Logf("%s held by the pause %s after the request was created", n, at.Sub(pause.CreationTimestamp.Time))
	}
	// explain, as a person runs it against the cluster, says what holds node-3 and why.
	explain := exec.CommandContext(ctx, filepath.Join(h.bin, "fence-controller"), "explain", "node-3", "--config", h.ConfigPath, "--kubeconfig", c.Kubeconfig)
	out, err := explain.CombinedOutput()
	t.Logf("fence-controller explain node-3:\n%s", out)
	for _, want := range []string{"incident:  " + heldBy("node-3", "paused").Name + ", phase Held", "evidence:  lease last renewed",
		"rule now:  Hold Paused: fencing is paused cluster-wide: patch-night: alice: rack 3 firmware", "next:      held by Paused"} {
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("explain (%v) printed no %q", err, want)
		}
	}
	nf2 := heldBy("node-2", "paused")
	if err := say(ctx, oncall, nf2.Name, map[string]any{v1alpha1.ForceAnnotation: "true"}); err != nil {
		t.Fatal(err)
	}
	// A new word in the pause request is written to the held incidents: a decision made
	// after the force, which the pause still holds.
	pause.Data["patch-night"] = "alice: rack 3 firmware, half done"
	if pause, err = cms.Update(ctx, pause, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	forced := heldBy("node-2", "half done")
	if len(forced.Status.Attempts) > 0 || forced.Annotations[v1alpha1.ForceAnnotation] != "true" {
		t.Fatalf("forced incident while paused: %d attempts, annotations %v; want held, nothing sent", len(forced.Status.Attempts), forced.Annotations)
	}
	if ev, _ := h.BMCs["node-2"].Events(); len(ev) != 0 {
		t.Errorf("node-2's BMC was touched while paused: %+v", ev)
	}
	if got := h.PIDs(); !maps.Equal(got, pids) {
		t.Errorf("controller processes %v after the pause, were %v: something restarted", got, pids)
	}
	if n := strings.Count(replica.Log(), "Acting as leader"); n != 1 {
		t.Errorf("the replica took leadership %d times", n)
	}

	if err := cms.Delete(ctx, pause.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fenced := waitIncident(t, ctx, c, "node-2", "Remediated", func(nf *v1alpha1.NodeFence) bool { return nf.Status.Phase == v1alpha1.PhaseRemediated })
	nf3 := waitIncident(t, ctx, c, "node-3", "held by a rule other than the pause", func(nf *v1alpha1.NodeFence) bool {
		return nf.Status.Phase == v1alpha1.PhaseHeld && !strings.Contains(nf.Status.Message, "paused")
	})

	cancelWord := func(reason string) map[string]any {
		return map[string]any{v1alpha1.CancelAnnotation: reason, v1alpha1.CancelByAnnotation: personName("oncall")}
	}
	if err := say(ctx, oncall, nf3.Name, cancelWord("rack 3 is being retired")); err != nil {
		t.Fatal(err)
	}
	ended := waitIncident(t, ctx, c, "node-3", "Cancelled", func(nf *v1alpha1.NodeFence) bool { return nf.Status.Phase == v1alpha1.PhaseCancelled })
	if cond := meta.FindStatusCondition(ended.Status.Conditions, v1alpha1.ConditionHeld); cond == nil || cond.Reason != v1alpha1.ConditionReasonCancelled ||
		!hasStep(ended, v1alpha1.StepCancelledByPerson, "rack 3 is being retired") {
		t.Errorf("cancelled incident: condition %+v, timeline %+v", cond, ended.Status.Timeline)
	}
	// The dead node gets no new automatic incident: the loop says so at every look.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(replica.Log(), "was cancelled by a person"), nil
	})
	if err != nil {
		t.Errorf("no sign that the loop keeps node-3 from a new incident after the cancel")
	}
	if incs, _ := Incidents(ctx, c, "node-3"); len(incs) != 1 {
		t.Errorf("node-3 has %d incidents after the cancel, want 1", len(incs))
	}

	// A cancel never undoes a fence that was sent.
	if err := say(ctx, oncall, fenced.Name, cancelWord("changed my mind")); err != nil {
		t.Fatal(err)
	}
	refused := waitIncident(t, ctx, c, "node-2", "refusing the cancel", func(nf *v1alpha1.NodeFence) bool {
		return hasStep(nf, v1alpha1.StepWordRefused, "never undoes one") || nf.Status.Phase != v1alpha1.PhaseRemediated
	})
	if refused.Status.Phase != v1alpha1.PhaseRemediated {
		t.Fatalf("cancel of a fenced incident moved it to %s", refused.Status.Phase)
	}
	if n, err := c.Client.CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{}); err != nil || len(n.Spec.Taints) == 0 {
		t.Errorf("node-2's taints after a refused cancel: %v (%v)", n.Spec.Taints, err)
	}
	// Gone for good: its Node object deleted, a cancel closes the incident.
	if err := c.Client.CoreV1().Nodes().Delete(ctx, "node-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := say(ctx, oncall, fenced.Name, cancelWord("node-2 decommissioned")); err != nil {
		t.Fatal(err)
	}
	closed := waitIncident(t, ctx, c, "node-2", "Recovered", func(nf *v1alpha1.NodeFence) bool { return nf.Status.Phase == v1alpha1.PhaseRecovered })
	if cond := meta.FindStatusCondition(closed.Status.Conditions, v1alpha1.ConditionRecovered); cond == nil || cond.Reason != v1alpha1.ConditionReasonDecommissioned {
		t.Errorf("closed incident's Recovered condition %+v, want reason Decommissioned", cond)
	}
}
