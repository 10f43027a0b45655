package sim

import (
	"context"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// fastHarness starts a 3-node harness with short kubelet intervals and a short detection
// threshold, so that an incident runs in seconds.
func fastHarness(t *testing.T, ctx context.Context, adjust func(*v1alpha1.Config)) *Harness {
	t.Helper()
	return fastHarnessWith(t, ctx, HarnessOptions{Config: adjust})
}

// fastHarnessWith is fastHarness with more options (3 nodes unless o.Nodes says); o.Config
// still applies on top.
func fastHarnessWith(t *testing.T, ctx context.Context, o HarnessOptions) *Harness {
	t.Helper()
	adjust := o.Config
	o.Dir, o.Logf = t.TempDir(), t.Logf
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	cluster := o.Cluster
	o.Cluster = func(o *Options) {
		o.LeaseRenewInterval = time.Second
		o.StatusUpdateInterval = 2 * time.Second
		if cluster != nil {
			cluster(o)
		}
	}
	o.Config = func(c *v1alpha1.Config) {
		c.Detection.LeaseStaleAfter = metav1.Duration{Duration: 5 * time.Second}
		c.Detection.NotReadyAfter = metav1.Duration{Duration: 5 * time.Second}
		if adjust != nil {
			adjust(c)
		}
	}
	h, err := StartHarness(ctx, o)
	if err != nil {
		t.Fatalf("start harness: %v", err)
	}
	stopOnCleanup(t, h, true)
	return h
}

// stopOnCleanup stops h when the test ends and fails the test if any of its processes
// outlived Stop. With dump, a failed test also logs the end of every process's log (the
// benchmarks' clusters are too large for that).
func stopOnCleanup(t *testing.T, h *Harness, dump bool) {
	t.Cleanup(func() {
		// Taken now, so that the controllers started after the harness are checked too.
		pids := h.PIDs()
		if err := h.Stop(); err != nil {
			t.Errorf("stop harness: %v", err)
		}
		for name, pid := range pids {
			if err := syscall.Kill(pid, 0); err == nil {
				t.Errorf("%s (pid %d) still running after Stop", name, pid)
			}
		}
		if dump && t.Failed() {
			dumpLogs(t, h)
		}
	})
}

func dumpLogs(t *testing.T, h *Harness) {
	for _, p := range h.processes() {
		if b, err := os.ReadFile(p.logPath); err == nil {
			lines := strings.Split(string(b), "\n")
			t.Logf("--- %s log (last 60 lines) ---\n%s", p.name, strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
	}
}

// deployWeb deploys the one-pod StatefulSet web and returns the node web-0 runs on, the
// victim of most tests.
func deployWeb(t *testing.T, ctx context.Context, c *Cluster) string {
	t.Helper()
	if err := c.DeployStatefulSet(ctx, "web", 1); err != nil {
		t.Fatalf("deploy statefulset: %v", err)
	}
	return podNodeOrFail(t, ctx, c, "web-0")
}

func podNodeOrFail(t *testing.T, ctx context.Context, c *Cluster, pod string) string {
	t.Helper()
	n, err := nodeOfPod(ctx, c, pod)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func startRecorder(t *testing.T, ctx context.Context, c *Cluster) *Recorder {
	t.Helper()
	rec, err := NewRecorder(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// startLeader starts a controller replica and waits until some replica holds the
// controller's Lease: started first, this one is the leader the test then relies on.
func startLeader(t *testing.T, ctx context.Context, h *Harness, name string, args ...string) *Replica {
	t.Helper()
	r, err := h.StartController(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCrashedNodeFencedBeforeRelease is the walking skeleton end to end: a node's kubelet
// dies while its machine keeps running; the controller must power it off through the
// IPMI agent, and only after ipmi_sim itself logged the power-off may the node's pods be
// deleted and its VolumeAttachments removed. The other nodes are left alone.
func TestCrashedNodeFencedBeforeRelease(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, nil)
	c := h.Cluster
	victim := deployWeb(t, ctx, c)
	rec := startRecorder(t, ctx, c)
	startLeader(t, ctx, h, "controller-1")

	c.Node(victim).Crash()
	crashAt := time.Now()
	t.Logf("crashed %s (kubelet stopped, BMC on)", victim)

	var moved string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, c, victim)
		if err != nil || len(incs) == 0 || incs[len(incs)-1].Status.Phase != v1alpha1.PhaseRemediated {
			return false, nil
		}
		p, err := c.Client.CoreV1().Pods(Namespace).Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == victim || p.Status.Phase != corev1.PodRunning {
			return false, nil
		}
		moved = p.Spec.NodeName
		return true, nil
	})
	if err != nil {
		t.Fatalf("web-0 did not move off fenced node %s: %v", victim, err)
	}
	t.Logf("web-0 running on %s %.1fs after the crash", moved, time.Since(crashAt).Seconds())

	power, err := h.BMCs[victim].Events()
	if err != nil {
		t.Fatal(err)
	}
	seen := rec.All()
	if on, err := h.BMCs[victim].PoweredOn(); err != nil || on {
		t.Errorf("BMC of %s: powered on = %t (%v), want off", victim, on, err)
	}
	if _, ok := FirstPowerOff(power); !ok {
		t.Fatalf("BMC of %s never logged a power off: %+v", victim, power)
	}
	for _, kind := range []string{SeenPodDeleted, SeenVADeleted, SeenTaintAdded} {
		if _, ok := rec.First(kind, victim); !ok {
			t.Errorf("no %s observed for %s", kind, victim)
		}
	}
	for _, v := range CheckReleasedAfterFence(seen, victim, power) {
		t.Errorf("invariant 1 violated: %s", v)
	}
	for name, b := range h.BMCs {
		if name == victim {
			continue
		}
		ev, err := b.Events()
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range CheckUntouched(seen, name, ev) {
			t.Errorf("%s", v)
		}
	}
	checkIncidentRecord(t, ctx, c, victim)
	incs, _ := Incidents(ctx, c, victim)
	PrintTimeline(testWriter{t}, crashAt, Timeline(victim, crashAt, incs, power, seen))
}

func checkIncidentRecord(t *testing.T, ctx context.Context, c *Cluster, node string) {
	t.Helper()
	incs, err := Incidents(ctx, c, node)
	if err != nil {
		t.Fatal(err)
	}
	if len(incs) != 1 {
		t.Fatalf("%d incidents for %s, want exactly 1", len(incs), node)
	}
	st := incs[0].Status
	if st.VerifiedLevel != 1 || st.Epoch < 1 || st.BootID == "" {
		t.Errorf("status verifiedLevel=%d epoch=%d bootID=%q, want 1, >=1, set", st.VerifiedLevel, st.Epoch, st.BootID)
	}
	// The volume attachment may go by kube-controller-manager's attach-detach controller
	// (it force-detaches once the pod is marked failed on an out-of-service node) or by
	// kubefence, whichever comes first; the recorder checks it went, and when.
	if !slices.Contains(st.Remediation.PodsDeleted, Namespace+"/web-0") || !slices.Contains(st.Remediation.TaintsAdded, "node.kubernetes.io/out-of-service") {
		t.Errorf("remediation record %+v misses web-0 or the taint", st.Remediation)
	}
	vas, err := c.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, va := range vas.Items {
		if va.Spec.NodeName == node {
			t.Errorf("volume attachment %s of fenced node %s still exists", va.Name, node)
		}
	}
	var order []string
	for _, s := range st.Timeline {
		order = append(order, s.Type)
	}
	want := []string{v1alpha1.StepDetected, v1alpha1.StepFenceStarted, v1alpha1.StepAgentCalled, v1alpha1.StepAgentReturned,
		v1alpha1.StepStateReadBack, v1alpha1.StepVerified, v1alpha1.StepTaintAdded, v1alpha1.StepPodsDeleted, v1alpha1.StepTaintAdded,
		v1alpha1.StepRemediated}
	if i := subsequence(order, want); i >= 0 {
		t.Errorf("timeline %v lacks %q in order %v", order, want[i], want)
	}
	for i := 1; i < len(st.Timeline); i++ {
		if st.Timeline[i].Time.Before(&st.Timeline[i-1].Time) {
			t.Errorf("timeline step %d (%s) is earlier than step %d", i, st.Timeline[i].Type, i-1)
		}
	}
}

// subsequence returns -1 if want appears in got in order, else the index of the first
// missing element.
func subsequence(got, want []string) int {
	j := 0
	for _, g := range got {
		if j < len(want) && g == want[j] {
			j++
		}
	}
	if j == len(want) {
		return -1
	}
	return j
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
