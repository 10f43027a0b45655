package sim

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

const (
	haLeaseDuration = 4 * time.Second
	haRenewDeadline = 3 * time.Second
	haRetryPeriod   = 500 * time.Millisecond
	// slowBMC keeps the leader inside the fence long enough to be killed there.
	slowBMC = 4 * time.Second
)

// haHarness is fastHarness with short leader election timings and slow BMCs, with the
// StatefulSet deployed, two replicas running (the first one leading) and the recorder on.
func haHarness(t *testing.T, ctx context.Context) (h *Harness, leader, standby *Replica, victim string, rec *Recorder) {
	t.Helper()
	h = fastHarnessWith(t, ctx, HarnessOptions{
		BMC: func(_ string, o *bmc.IPMIOptions) { o.OffDelay = slowBMC },
		Config: func(c *v1alpha1.Config) {
			c.LeaderElection.LeaseDuration = metav1.Duration{Duration: haLeaseDuration}
			c.LeaderElection.RenewDeadline = metav1.Duration{Duration: haRenewDeadline}
			c.LeaderElection.RetryPeriod = metav1.Duration{Duration: haRetryPeriod}
		},
	})
	victim = deployWeb(t, ctx, h.Cluster)
	rec = startRecorder(t, ctx, h.Cluster)
	leader = startLeader(t, ctx, h, "controller-a")
	standby, err := h.StartController("controller-b")
	if err != nil {
		t.Fatal(err)
	}
	pollLog(t, ctx, standby, "Caches synced")
	return h, leader, standby, victim, rec
}

func pollLog(t *testing.T, ctx context.Context, r *Replica, text string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(r.Log(), text), nil
	})
	if err != nil {
		t.Fatalf("replica log never showed %q: %v", text, err)
	}
}

// waitMidFence waits until the leader has asked the victim's BMC to power off and the
// BMC has not yet done it.
func waitMidFence(t *testing.T, ctx context.Context, h *Harness, victim string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		ev, err := h.BMCs[victim].Events()
		if err != nil {
			return false, err
		}
		requested, off := false, false
		for _, e := range ev {
			requested = requested || e.Action == bmc.ActionOffRequested
			off = off || e.Action == bmc.ActionOff
		}
		if off {
			return false, errPowerOffTooEarly
		}
		return requested, nil
	})
	if err != nil {
		t.Fatalf("leader never got mid-fence on %s: %v", victim, err)
	}
}

var errPowerOffTooEarly = &stringError{"the BMC powered off before the leader could be stopped mid-fence"}

type stringError struct{ s string }

func (e *stringError) Error() string { return e.s }

func controllerLease(t *testing.T, ctx context.Context, h *Harness) *coordinationv1.Lease {
	t.Helper()
	le := h.Config.LeaderElection
	l, err := h.Cluster.Client.CoordinationV1().Leases(le.Namespace).Get(ctx, le.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// takenOver is the leader Lease, which must have left old's holder (a killed leader).
func takenOver(t *testing.T, ctx context.Context, h *Harness, old *coordinationv1.Lease) *coordinationv1.Lease {
	t.Helper()
	lease := controllerLease(t, ctx, h)
	if *lease.Spec.HolderIdentity == *old.Spec.HolderIdentity {
		t.Fatalf("lease still held by the killed leader %s", *old.Spec.HolderIdentity)
	}
	return lease
}

// waitReleased waits until the victim's incident is remediated and web-0 runs elsewhere.
func waitReleased(t *testing.T, ctx context.Context, h *Harness, victim string) v1alpha1.NodeFence {
	t.Helper()
	var nf v1alpha1.NodeFence
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, h.Cluster, victim)
		if err != nil || len(incs) == 0 || incs[len(incs)-1].Status.Phase != v1alpha1.PhaseRemediated {
			return false, nil
		}
		nf = incs[len(incs)-1]
		p, err := h.Cluster.Client.CoreV1().Pods(Namespace).Get(ctx, "web-0", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != victim && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("incident of %s not remediated with web-0 moved: %v", victim, err)
	}
	return nf
}

// TestLeaderKilledMidFence: the leader is SIGKILLed (with its agent) while the victim's
// BMC is powering off. The standby must take over only after the old lease expired,
// resume the same incident at a new epoch, re-issue the power-off idempotently, and only
// then release the node's workloads.
func TestLeaderKilledMidFence(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h, leader, _, victim, rec := haHarness(t, ctx)
	old := controllerLease(t, ctx, h)

	h.Cluster.Node(victim).Crash()
	waitMidFence(t, ctx, h, victim)
	lastRenew := controllerLease(t, ctx, h).Spec.RenewTime.Time
	if err := leader.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	<-leader.Done()

	nf := waitReleased(t, ctx, h, victim)
	lease := takenOver(t, ctx, h, old)
	acquired := lease.Spec.AcquireTime.Time
	t.Logf("takeover: new leader acquired %.2fs after the kill (%.2fs after the old leader's last renewal)",
		acquired.Sub(killedAt).Seconds(), acquired.Sub(lastRenew).Seconds())
	// client-go's standby counts the duration from when it saw the record change, and it
	// compares records with renewTime cut to the second, so the earliest takeover is one
	// duration after the start of the last renewal's second.
	if earliest := lastRenew.Truncate(time.Second).Add(haLeaseDuration); acquired.Before(earliest) {
		t.Errorf("standby acquired at %s, before the old lease (renewed %s, %s) could have expired (%s)", acquired, lastRenew, haLeaseDuration, earliest)
	}
	checkResumed(t, ctx, h, rec, victim, nf, *lease.Spec.HolderIdentity)
}

// TestPausedLeaderDeposed: the leader is frozen (SIGSTOP) mid-fence, the standby takes
// over and finishes; when the old leader wakes up it must find out it was deposed and exit
// with code 2 without writing anything.
func TestPausedLeaderDeposed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h, leader, _, victim, rec := haHarness(t, ctx)

	h.Cluster.Node(victim).Crash()
	waitMidFence(t, ctx, h, victim)
	if err := leader.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	nf := waitReleased(t, ctx, h, victim)
	newLeader := *controllerLease(t, ctx, h).Spec.HolderIdentity
	if err := leader.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leader.Done():
	case <-ctx.Done():
		t.Fatal("the paused leader kept running after it was deposed")
	}
	if code := leader.ExitCode(); code != 2 {
		t.Errorf("deposed leader exit code = %d, want 2", code)
	}
	checkResumed(t, ctx, h, rec, victim, nf, newLeader)
	incs, err := Incidents(ctx, h.Cluster, victim)
	if err != nil {
		t.Fatal(err)
	}
	if st := incs[0].Status; st.Epoch != nf.Status.Epoch || st.Leader != newLeader || st.Phase != v1alpha1.PhaseRemediated {
		t.Errorf("after the old leader woke: epoch %d leader %s phase %s, want %d %s Remediated",
			st.Epoch, st.Leader, st.Phase, nf.Status.Epoch, newLeader)
	}
}

func checkResumed(t *testing.T, ctx context.Context, h *Harness, rec *Recorder, victim string, nf v1alpha1.NodeFence, newLeader string) {
	t.Helper()
	incs, err := Incidents(ctx, h.Cluster, victim)
	if err != nil {
		t.Fatal(err)
	}
	if len(incs) != 1 {
		t.Errorf("%d incidents for %s, want 1: a takeover must resume, not start again", len(incs), victim)
	}
	if nf.Status.Epoch < 2 || nf.Status.Leader != newLeader {
		t.Errorf("incident written at epoch %d by %s, want epoch >= 2 by the new leader %s", nf.Status.Epoch, nf.Status.Leader, newLeader)
	}
	power, err := h.BMCs[victim].Events()
	if err != nil {
		t.Fatal(err)
	}
	if on, _ := h.BMCs[victim].PoweredOn(); on {
		t.Errorf("BMC of %s still on", victim)
	}
	for _, v := range CheckReleasedAfterFence(rec.All(), victim, power) {
		t.Errorf("invariant 1 violated: %s", v)
	}
	for name, b := range h.BMCs {
		if name == victim {
			continue
		}
		ev, _ := b.Events()
		for _, v := range CheckUntouched(rec.All(), name, ev) {
			t.Errorf("%s", v)
		}
	}
	var actions []string
	for _, e := range power {
		actions = append(actions, e.Action)
	}
	t.Logf("BMC of %s logged %v; attempts %d", victim, actions, len(nf.Status.Attempts))
}

// identityOf returns the replica's identity as it logged it.
func identityOf(t *testing.T, ctx context.Context, r *Replica) string {
	t.Helper()
	pollLog(t, ctx, r, "Caches synced")
	m := cachesSynced.FindStringSubmatch(r.Log())
	if m == nil {
		t.Fatalf("no identity in replica log")
	}
	return m[1]
}

// TestIdentityLeases: every replica keeps its own identity Lease; when one dies, the
// leader collects its Lease after the (shortened) duration and leaves the others.
func TestIdentityLeases(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h := fastHarness(t, ctx, nil)
	args := []string{"--identity-lease-duration=3s", "--identity-renew-interval=500ms"}
	ids := map[string]*Replica{}
	for _, name := range []string{"controller-a", "controller-b", "controller-c"} {
		r, err := h.StartController(name, args...)
		if err != nil {
			t.Fatal(err)
		}
		ids[identityOf(t, ctx, r)] = r
	}
	leader, err := h.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holders := func() map[string]bool {
		list, err := h.Cluster.Client.CoordinationV1().Leases(ControllerNamespace).List(ctx,
			metav1.ListOptions{LabelSelector: "fencing.kubefence.io/identity=true"})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, l := range list.Items {
			got[deref(l.Spec.HolderIdentity)] = true
		}
		return got
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return len(holders()) == 3, nil
	})
	if err != nil {
		t.Fatalf("identity leases %v, want one per replica %v", holders(), ids)
	}
	var victim string
	for id := range ids {
		if id != leader {
			victim = id
			break
		}
	}
	if err := ids[victim].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return !holders()[victim], nil
	})
	if err != nil {
		t.Fatalf("lease of killed replica %s never collected", victim)
	}
	t.Logf("lease of killed replica collected %.1fs after the kill", time.Since(killedAt).Seconds())
	got := holders()
	for id := range ids {
		if id != victim && !got[id] {
			t.Errorf("lease of live replica %s was collected", id)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestCleanShutdownReleasesLease: a leader stopped with SIGTERM (a rolling update, a
// drained node) gives its Lease up before it exits, so the standby takes over after one
// retry period instead of a whole lease duration; it exits 0 and leaves no agent behind.
func TestCleanShutdownReleasesLease(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h, leader, standby, victim, _ := haHarness(t, ctx)
	// An incident makes the leader start its agent plugin, which must go with it.
	h.Cluster.Node(victim).Crash()
	waitReleased(t, ctx, h, victim)
	oldID, standbyID := identityOf(t, ctx, leader), identityOf(t, ctx, standby)
	if holder := *controllerLease(t, ctx, h).Spec.HolderIdentity; holder != oldID {
		t.Fatalf("lease held by %q, want the first replica %q", holder, oldID)
	}
	pgid := leader.p.pid()
	terminated := time.Now()
	if err := leader.Terminate(); err != nil {
		t.Fatal(err)
	}
	<-leader.Done()
	t.Logf("leader exited %s after SIGTERM", time.Since(terminated).Round(time.Millisecond))
	lease := controllerLease(t, ctx, h)
	if holder := *lease.Spec.HolderIdentity; holder == oldID {
		t.Errorf("lease still held by %s after it exited: not released on shutdown", oldID)
	}
	if code := leader.ExitCode(); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
	if err := syscall.Kill(-pgid, 0); err == nil {
		t.Errorf("a process of the stopped replica's group (an agent plugin) is still running")
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return *controllerLease(t, ctx, h).Spec.HolderIdentity == standbyID, nil
	})
	if err != nil {
		t.Errorf("the standby %s never took the Lease over: %v", standbyID, err)
	}
}
