package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin/plugintest"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/podrelease"
)

// lead makes the controller lead at epoch 1 under a Lease it holds, checked before every
// write as with leader election on; it returns what OnDeposed is told.
func (f *fixture) lead() *error {
	f.t.Helper()
	le := f.c.cfg.LeaderElection
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: le.Name, Namespace: le.Namespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("me"), LeaseTransitions: ptr.To[int32](0)}}
	if _, err := f.kube.CoordinationV1().Leases(le.Namespace).Create(context.Background(), lease, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.kube.ClearActions()
	return f.checkLease(&leader.LeaseGuard{Client: f.kube, Config: le, Identity: "me"}, 1)
}

// handOver gives the leader Lease to a successor, as a standby's takeover does.
func (f *fixture) handOver() {
	f.t.Helper()
	le := f.c.cfg.LeaderElection
	leases := f.kube.CoordinationV1().Leases(le.Namespace)
	l, err := leases.Get(context.Background(), le.Name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("successor"), ptr.To[int32](1)
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// backOnANewBoot is a fixture whose node-1 was fenced through ipmi at bmc-node-1 and is
// back, Ready, on a new boot, with the out-of-service taint the incident added.
func backOnANewBoot(t *testing.T, cfg *v1alpha1.Config) *fixture {
	t.Helper()
	nf := fencedIncident(v1alpha1.PhaseRemediated, v1alpha1.AttemptVerified)
	nf.Status.Attempts[0].Target = "bmc-node-1"
	nf.Status.Remediation.TaintsAdded = []string{"node.kubernetes.io/out-of-service"}
	objs := threeNodes()
	n := fixtureNode("node-1", "boot-2", true)
	n.Spec.Taints = []corev1.Taint{{Key: "node.kubernetes.io/out-of-service", Effect: corev1.TaintEffectNoExecute}}
	objs[0] = n
	f := newFixture(t, cfg, append(objs, nf)...)
	f.bmc.On = false
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut()
	return f
}

// TestUndoGuardedLikeAFence: recovery's Unfence and the Reboot action's power on are
// sent only as a Fence is (invariant 11): on the incident's record first, then after a
// fresh read of the leader Lease. A replica deposed since its last check, or whose
// successor has written the incident, sends nothing: its late Unfence could lift the fence
// the successor holds on the node.
func TestUndoGuardedLikeAFence(t *testing.T) {
	t.Run("recovery, deposed", func(t *testing.T) {
		f := backOnANewBoot(t, fixtureConfig())
		deposed := f.lead()
		f.handOver()
		if _, err := f.c.sync(context.Background(), "node-1"); !errors.Is(err, leader.ErrStaleEpoch) {
			t.Errorf("sync: %v, want a stale epoch", err)
		}
		f.expectCalls()
		if *deposed == nil {
			t.Error("OnDeposed was not told")
		}
		if got := f.incident("node-1"); got.Status.Phase != v1alpha1.PhaseRemediated {
			t.Errorf("phase %s, want Remediated: nothing done", got.Status.Phase)
		}
	})
	t.Run("recovery, the successor wrote the incident", func(t *testing.T) {
		f := backOnANewBoot(t, fixtureConfig())
		f.lead()
		// The successor closed the incident at its epoch; this replica's cache is behind.
		stored := f.incident("node-1")
		stored.Status.Epoch, stored.Status.Leader, stored.Status.Phase = 2, "successor", v1alpha1.PhaseRecovered
		stored.ResourceVersion = "2"
		if err := f.dyn.Tracker().Update(v1alpha1.NodeFenceResource, stored, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := f.c.sync(context.Background(), "node-1"); err == nil {
			t.Error("sync passed; want the write ahead of the Unfence refused")
		}
		f.expectCalls()
	})
	t.Run("recovery, leading", func(t *testing.T) {
		f := backOnANewBoot(t, fixtureConfig())
		f.lead()
		f.sync("node-1")
		f.expectCalls("Unfence bmc-node-1")
		got := f.incident("node-1")
		if got.Status.Phase != v1alpha1.PhaseRecovered {
			t.Errorf("phase %s, want Recovered", got.Status.Phase)
		}
		called := stepsOf(got, v1alpha1.StepUnfenceCalled)
		if len(called) != 1 || !strings.Contains(called[0], "target bmc-node-1") {
			t.Errorf("UnfenceCalled steps %q, want one naming bmc-node-1", called)
		}
	})
	t.Run("power on, deposed after the release", func(t *testing.T) {
		cfg := fixtureConfig()
		cfg.Policies[0].Action = v1alpha1.ActionReboot
		f := newFixture(t, cfg, append(threeNodes(), webPod("node-1"))...)
		deposed := f.lead()
		// The successor takes over right after the release is recorded.
		f.dyn.PrependReactor("update", "nodefences", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if nf := a.(k8stesting.UpdateAction).GetObject().(*v1alpha1.NodeFence); nf.Status.Phase == v1alpha1.PhaseRemediated {
				f.handOver()
			}
			return false, nil, nil
		})
		f.clock.Set(f0.Add(time.Minute))
		f.renewAllBut("node-1")
		_, _ = f.c.sync(context.Background(), "node-1")
		f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
		if *deposed == nil {
			t.Error("OnDeposed was not told")
		}
	})
}

// TestCallsGoToTheFencedTarget: a node's mapping edited mid-incident (its BMC annotation
// now names a spare machine's) does not move the incident's calls: the read back, the
// read back of a call found in flight and the Unfence all go to the target the Fence
// went to.
func TestCallsGoToTheFencedTarget(t *testing.T) {
	edited := func(f *fixture) {
		n := fixtureNode("node-1", "boot-node-1", false)
		n.Annotations["bmc"] = "bmc-spare"
		f.cache(n)
	}
	t.Run("read back", func(t *testing.T) {
		nf := fencedIncident(v1alpha1.PhaseFencing, v1alpha1.AttemptVerifying)
		nf.Status.Attempts[0].Target = "bmc-node-1"
		f := newFixture(t, fixtureConfig(), append(threeNodes(), nf)...)
		f.bmc.On = false
		f.clock.Set(f0.Add(time.Minute))
		f.renewAllBut("node-1")
		edited(f)
		f.sync("node-1")
		f.expectCalls("Status bmc-node-1")
	})
	t.Run("a call found in flight", func(t *testing.T) {
		nf := fencedIncident(v1alpha1.PhaseFencing, v1alpha1.AttemptFencing)
		nf.Status.Attempts[0].Target = "bmc-node-1"
		f := newFixture(t, fixtureConfig(), append(threeNodes(), nf)...)
		f.clock.Set(f0.Add(time.Minute))
		f.renewAllBut("node-1")
		edited(f)
		f.sync("node-1")
		// Read on, then read again: the lost call is never sent again.
		f.expectCalls("Status bmc-node-1", "Status bmc-node-1")
	})
	t.Run("a new attempt records its target", func(t *testing.T) {
		f := newFixture(t, fixtureConfig(), threeNodes()...)
		f.clock.Set(f0.Add(time.Minute))
		f.renewAllBut("node-1")
		f.sync("node-1")
		if got := f.incident("node-1").Status.Attempts[0].Target; got != "bmc-node-1" {
			t.Errorf("attempt target %q, want bmc-node-1", got)
		}
	})
	t.Run("unfence", func(t *testing.T) {
		f := backOnANewBoot(t, fixtureConfig())
		n := fixtureNode("node-1", "boot-2", true)
		n.Annotations["bmc"] = "bmc-spare"
		n.Spec.Taints = []corev1.Taint{{Key: "node.kubernetes.io/out-of-service", Effect: corev1.TaintEffectNoExecute}}
		f.cache(n)
		f.sync("node-1")
		f.expectCalls("Unfence bmc-node-1")
	})
}

// TestRecoveryRestoresWhatTheFenceRemoved: an iSCSI agent's Unfence is given what its
// Fence calls answered ("removed:" lines, which say which rules to restore), not the
// read back that verified the fence and replaced the attempt's Evidence.
func TestRecoveryRestoresWhatTheFenceRemoved(t *testing.T) {
	var restore string
	agent := &plugintest.Funcs{UnfenceFunc: func(_ context.Context, req plugin.Request) (plugin.Result, error) {
		restore = req.Restore
		return plugin.Result{State: plugin.StateOn, Evidence: "restored"}, nil
	}}
	nf, _ := remediatedIncident(f0)
	nf.Status.Attempts[0].FenceEvidence = "removed: target=iqn.x:t iqn=iqn.x:a"
	nf.Status.Attempts[0].Evidence = "iqn.x:a has no session and no ACL on iqn.x:t"
	node := rebootedNode("boot-2")
	c := unfenceController(t, nf, agent, node)
	obs := detector.Observation{Node: "node-1", Health: detector.Healthy, BootID: "boot-2"}
	if _, err := c.recover(context.Background(), nf, node, obs); err != nil {
		t.Fatal(err)
	}
	if restore != "removed: target=iqn.x:t iqn=iqn.x:a" {
		t.Errorf("Unfence restore %q, want the Fence call's removed line", restore)
	}
}

// TestReleaseRecordSurvivesACrash: a leader that released a node after a verified fence
// and died before it recorded the release (inside the storm's release gate, say) leaves
// an incident Fencing on record and its taints on the node, marked as the incident's. A
// successor that cannot read the fence back (the BMC died with the node) records the
// release from the mark and ends Remediated, never Failed with "nothing was released";
// the same holds when its own tries failed first.
func TestReleaseRecordSurvivesACrash(t *testing.T) {
	for name, tc := range map[string]struct {
		leader string
		state  v1alpha1.AttemptState
		calls  []string
	}{
		"adopted, the read back lost":     {"other", v1alpha1.AttemptFencing, nil},
		"this replica's own tries failed": {"me", v1alpha1.AttemptFailed, nil},
	} {
		t.Run(name, func(t *testing.T) {
			nf := fencedIncident(v1alpha1.PhaseFencing, tc.state)
			nf.Status.Leader = tc.leader
			nf.Status.Attempts[0].Target = "bmc-node-1"
			if tc.state == v1alpha1.AttemptFailed {
				nf.Status.Attempts[0].ErrorKind = string(plugin.KindPermanent)
				nf.Status.Attempts[0].Error = "no answer"
				nf.Status.Level = 2 // every level failed
			}
			objs := threeNodes()
			n := fixtureNode("node-1", "boot-node-1", false)
			n.Spec.Taints = []corev1.Taint{podrelease.FencedTaint, podrelease.OutOfServiceTaint}
			n.Annotations[podrelease.OwnerAnnotation] = nf.Name + "=" + podrelease.FencedTaint.Key + "," + podrelease.OutOfServiceTaint.Key
			objs[0] = n
			f := newFixture(t, fixtureConfig(), append(objs, nf)...)
			unreachable := plugin.Errorf(plugin.KindTargetUnreachable, "bmc-node-1: no answer")
			f.bmc.FenceFunc = func(context.Context) error { return unreachable }
			f.bmc.StatusFunc = func(string) error { return unreachable }
			f.clock.Set(f0.Add(time.Minute))
			f.renewAllBut("node-1")
			f.sync("node-1")
			f.expectCalls(tc.calls...)
			got := f.incident("node-1")
			if got.Status.Phase != v1alpha1.PhaseRemediated {
				t.Fatalf("phase %s (%q), want Remediated", got.Status.Phase, got.Status.Message)
			}
			if taints := got.Status.Remediation.TaintsAdded; len(taints) != 2 {
				t.Errorf("taints recorded %v, want both the mark names", taints)
			}
			if found := stepsOf(got, v1alpha1.StepReleaseFound); len(found) != 1 || !strings.Contains(found[0], "owner mark") {
				t.Errorf("ReleaseFound steps %q, want one citing the owner mark", found)
			}
			if got.Status.VerifiedLevel != 1 || got.Status.Attempts[0].State != v1alpha1.AttemptVerified {
				t.Errorf("verified level %d, attempt %s; want level 1 verified", got.Status.VerifiedLevel, got.Status.Attempts[0].State)
			}
		})
	}
}
