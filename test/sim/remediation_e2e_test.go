package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// createIncident writes an incident as a controller would have left it.
func createIncident(t *testing.T, ctx context.Context, c *Cluster, nf *v1alpha1.NodeFence) {
	t.Helper()
	dyn, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(nf)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
	u.SetKind("NodeFence")
	created, err := dyn.Resource(v1alpha1.NodeFenceResource).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = obj["status"]
	if _, err := dyn.Resource(v1alpha1.NodeFenceResource).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestOrphanTaintsRepaired: a closed incident that still records taints it added (its
// leader died between removing them and saying so, or a person reopened nothing) has
// them removed by the next leader; kubefence's own taint with no record behind it is
// reported and left alone.
func TestOrphanTaintsRepaired(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, nil)
	c := h.Cluster
	addTaint(t, ctx, c, "node-1", corev1.Taint{Key: fencedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule})
	addTaint(t, ctx, c, "node-2", corev1.Taint{Key: fencedTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule})
	createIncident(t, ctx, c, &v1alpha1.NodeFence{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1-closed"},
		Spec:       v1alpha1.NodeFenceSpec{NodeName: "node-1", RequestedBy: "controller"},
		Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseRecovered, Epoch: 1,
			Remediation: v1alpha1.Remediation{TaintsAdded: []string{fencedTaint}}},
	})
	if _, err := h.StartController("controller"); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return !slices.Contains(taintKeys(t, ctx, c, "node-1"), fencedTaint), nil
	})
	if err != nil {
		t.Fatalf("recorded orphan taint on node-1 not removed: %v", taintKeys(t, ctx, c, "node-1"))
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ev, err := c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + v1alpha1.ReasonOrphanTaint})
		return err == nil && len(ev.Items) > 0, nil
	})
	if err != nil {
		t.Errorf("no OrphanTaint event for node-2's unrecorded taint")
	}
	if !slices.Contains(taintKeys(t, ctx, c, "node-2"), fencedTaint) {
		t.Errorf("unrecorded taint on node-2 was removed: kubefence guessed")
	}
	incs, err := Incidents(ctx, c, "node-1")
	if err != nil || len(incs) != 1 || len(incs[0].Status.Remediation.TaintsAdded) != 0 {
		t.Errorf("closed incident still records taints after the repair: %+v (%v)", incs, err)
	}
}

// TestResumeFromRecordedTaint: a leader died after recording that it would add the
// out-of-service taint and before adding it. The next leader resumes the verified
// incident: it adds the taint, which it now owns, releases the node and later removes it.
func TestResumeFromRecordedTaint(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, nil)
	c := h.Cluster
	victim := deployWeb(t, ctx, c)
	// The predecessor's fence was real: the node is off.
	if err := h.BMCs[victim].SetPower(false); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	createIncident(t, ctx, c, &v1alpha1.NodeFence{
		ObjectMeta: metav1.ObjectMeta{Name: victim + "-resumed"},
		Spec:       v1alpha1.NodeFenceSpec{NodeName: victim, RequestedBy: "controller"},
		Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseFenced, Epoch: 1, Policy: "default", Level: 1, VerifiedLevel: 1,
			BootID: c.Node(victim).BootID(),
			Attempts: []v1alpha1.Attempt{{Level: 1, Agent: "ipmi", Try: 1, State: v1alpha1.AttemptVerified,
				Started: now, Deadline: now, Finished: &now, PowerState: "off"}},
			Remediation: v1alpha1.Remediation{TaintsAdded: []string{outOfService}}},
	})
	if _, err := h.StartController("controller"); err != nil {
		t.Fatal(err)
	}
	nf := waitReleased(t, ctx, h, victim)
	got := taintKeys(t, ctx, c, victim)
	if !slices.Contains(got, outOfService) || !slices.Contains(nf.Status.Remediation.TaintsAdded, outOfService) {
		t.Fatalf("taints %v, recorded %v: want the recorded out-of-service taint added and owned", got, nf.Status.Remediation.TaintsAdded)
	}
	powerOn(t, ctx, h, victim)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return !slices.Contains(taintKeys(t, ctx, c, victim), outOfService), nil
	})
	if err != nil {
		t.Errorf("out-of-service taint left after recovery: %v", taintKeys(t, ctx, c, victim))
	}
}

// TestDirectStrategy: with the Direct strategy kubefence deletes the pods and volume
// attachments itself and adds no out-of-service taint.
func TestDirectStrategy(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, func(cfg *v1alpha1.Config) { cfg.Policies[0].Remediation = v1alpha1.StrategyDirect })
	c := h.Cluster
	victim := deployWeb(t, ctx, c)
	rec := startRecorder(t, ctx, c)
	startLeader(t, ctx, h, "controller")
	c.Node(victim).Crash()
	nf := waitReleased(t, ctx, h, victim)
	// Only kubefence's NoSchedule taint, which keeps recreated pods off the dead node:
	// no out-of-service taint, so kube-controller-manager's PodGC takes no part.
	if got := taintKeys(t, ctx, c, victim); slices.Contains(got, outOfService) || !slices.Contains(got, fencedTaint) {
		t.Errorf("Direct strategy taints %v: want %s and not %s", got, fencedTaint, outOfService)
	}
	if len(nf.Status.Remediation.PodsDeleted) == 0 || len(nf.Status.Remediation.VolumeAttachmentsDeleted) == 0 {
		t.Errorf("remediation %+v: want pods and volume attachments deleted by kubefence", nf.Status.Remediation)
	}
	power, _ := h.BMCs[victim].Events()
	for _, v := range CheckReleasedAfterFence(rec.All(), victim, power) {
		t.Errorf("invariant 1 violated: %s", v)
	}
	logReleaseTimes(t, nf, rec, victim)
}

// logReleaseTimes reports, from the incident's verified step, when the API server showed
// the node's pods and volume attachments gone.
func logReleaseTimes(t *testing.T, nf v1alpha1.NodeFence, rec *Recorder, node string) {
	verified, ok := stepAt(nf, v1alpha1.StepVerified)
	if !ok {
		t.Errorf("no Verified step in the timeline")
		return
	}
	var pods, vas time.Time
	for _, s := range rec.All() {
		if s.Node != node {
			continue
		}
		switch s.Kind {
		case SeenPodDeleted:
			pods = s.At
		case SeenVADeleted:
			vas = s.At
		}
	}
	since := func(at time.Time) string {
		if at.IsZero() {
			return "not seen"
		}
		return fmt.Sprintf("%.3fs", at.Sub(verified).Seconds())
	}
	t.Logf("verified fence -> pods deleted %s, volume attachments gone %s", since(pods), since(vas))
}

// TestOutOfServiceTaintStrategy: with the OutOfServiceTaint strategy kubefence only taints
// the verified-fenced node and kube-controller-manager's PodGC force-deletes its pods.
// (The simulated kubelets play the attach-detach controller, so the volume attachment is
// not removed here; on real nodes TestFencingOnRealNodes' OutOfServiceTaint round sees
// Kubernetes detach it.)
func TestOutOfServiceTaintStrategy(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := fastHarnessWith(t, ctx, HarnessOptions{
		Config: func(cfg *v1alpha1.Config) { cfg.Policies[0].Remediation = v1alpha1.StrategyOutOfServiceTaint },
		// PodGC acts on out-of-service nodes that are NotReady.
		Cluster: func(o *Options) {
			o.ControllerManagerArgs = append(o.ControllerManagerArgs, "--node-monitor-grace-period=5s")
		},
	})
	c := h.Cluster
	victim := deployWeb(t, ctx, c)
	rec := startRecorder(t, ctx, c)
	startLeader(t, ctx, h, "controller")
	c.Node(victim).Crash()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, ok := rec.First(SeenPodDeleted, victim)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("PodGC never deleted web-0 from the out-of-service node %s", victim)
	}
	incs, err := Incidents(ctx, c, victim)
	if err != nil || len(incs) != 1 {
		t.Fatalf("incidents %d (%v), want 1", len(incs), err)
	}
	nf := incs[0]
	if len(nf.Status.Remediation.PodsDeleted) != 0 || !slices.Contains(nf.Status.Remediation.TaintsAdded, outOfService) {
		t.Errorf("remediation %+v: want only the out-of-service taint, no pod deleted by kubefence", nf.Status.Remediation)
	}
	power, _ := h.BMCs[victim].Events()
	for _, v := range CheckReleasedAfterFence(rec.All(), victim, power) {
		t.Errorf("invariant 1 violated: %s", v)
	}
	logReleaseTimes(t, nf, rec, victim)
}

// TestLateBoundPodReleased: a scheduler working from a stale cache binds a pod to a node
// already fenced and released (here the test binds it itself). kubefence reads the fence
// back and releases that pod too; a pod that tolerates the fenced taint does not set this
// off; and once the fence can no longer be read back, a late pod is left alone and the
// refusal recorded. Direct strategy: no out-of-service taint, so only kubefence can
// delete the pods within the test's time.
func TestLateBoundPodReleased(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, func(cfg *v1alpha1.Config) { cfg.Policies[0].Remediation = v1alpha1.StrategyDirect })
	c := h.Cluster
	victim := deployWeb(t, ctx, c)
	if _, err := h.StartController("controller"); err != nil {
		t.Fatal(err)
	}
	c.Node(victim).Crash()
	waitReleased(t, ctx, h, victim)

	bind := func(name string, tolerations ...corev1.Toleration) {
		t.Helper()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name},
			Spec: corev1.PodSpec{NodeName: victim, Tolerations: tolerations,
				Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
		if _, err := c.Client.CoreV1().Pods(Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The step of the incident whose message names pod, once it is recorded.
	waitStep := func(typ, pod string) v1alpha1.Step {
		t.Helper()
		var found v1alpha1.Step
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			incs, err := Incidents(ctx, c, victim)
			if err != nil || len(incs) == 0 {
				return false, nil
			}
			for _, s := range incs[len(incs)-1].Status.Timeline {
				if s.Type == typ && strings.Contains(s.Message, Namespace+"/"+pod) {
					found = s
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("no %s step naming %s: %v", typ, pod, err)
		}
		return found
	}
	// Only a NotFound answer means gone: a failed read is not a deletion.
	exists := func(pod string) bool {
		_, err := c.Client.CoreV1().Pods(Namespace).Get(ctx, pod, metav1.GetOptions{})
		return !apierrors.IsNotFound(err)
	}

	bind("tolerant", corev1.Toleration{Key: fencedTaint, Operator: corev1.TolerationOpExists})
	bind("late")
	step := waitStep(v1alpha1.StepLateRelease, "late")
	if strings.Contains(step.Message, "tolerant") || !strings.Contains(step.Message, "reads off") {
		t.Errorf("LateRelease step %q: want only the late pod named, and the fence read back off", step.Message)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return !exists("late"), nil
	})
	if err != nil {
		t.Fatalf("the late pod was not released: %v", err)
	}

	// The BMC stops answering: the fence can no longer be read back, so a late pod stays.
	// (Powering the machine on instead would boot the simulated node again: recovery.)
	if err := h.BMCs[victim].Stop(); err != nil {
		t.Fatal(err)
	}
	bind("late-2")
	step = waitStep(v1alpha1.StepLateReleaseRefused, "late-2")
	if strings.Contains(step.Message, "error <nil>") {
		t.Errorf("LateReleaseRefused step %q: want the agent's error", step.Message)
	}
	if !exists("late-2") {
		t.Errorf("late-2 was deleted although the fence could not be read back")
	}
}
