package fencer

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/policy"
)

var l0 = time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)

// incidentIn is the controller's own incident in phase, detected at l0 on a Lease last
// renewed a minute before, last written by replica "me".
func incidentIn(phase v1alpha1.Phase) *v1alpha1.NodeFence {
	rt := metav1.NewMicroTime(l0.Add(-time.Minute))
	nf := &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "node-1", RequestedBy: v1alpha1.RequestedByController},
		Status: v1alpha1.NodeFenceStatus{Phase: phase, Leader: "me", BootID: "boot-1", LeaseRenewTime: &rt,
			Timeline: []v1alpha1.Step{{Type: v1alpha1.StepDetected, Time: metav1.NewMicroTime(l0)}}}}
	if phase == v1alpha1.PhaseRemediated {
		fin := metav1.NewMicroTime(l0.Add(time.Minute))
		nf.Status.VerifiedLevel = 1
		nf.Status.Attempts = []v1alpha1.Attempt{{Level: 1, Agent: "ipmi", Try: 1, State: v1alpha1.AttemptVerified, Finished: &fin}}
	}
	return nf
}

func with(nf *v1alpha1.NodeFence, change func(*v1alpha1.NodeFence)) *v1alpha1.NodeFence {
	change(nf)
	return nf
}

func decided(v policy.Verdict, reason, msg string) *policy.Decision {
	return &policy.Decision{Verdict: v, Reason: reason, Message: msg}
}

func live(s string) *string { return &s }

// unhealthy is the detector's word on a node silent since a minute before l0.
var unhealthy = detector.Observation{Node: "node-1", Health: detector.Unhealthy, BootID: "boot-1", Kubelet: detector.KubeletSeen{RenewTime: l0.Add(-time.Minute)}}

type lifecycleCase struct {
	name string
	nf   *v1alpha1.NodeFence
	f    Facts
	want Action
}

// lifecycleCases: every row is a state an incident can be in, with what was observed, and
// the one thing the machine asks for.
func lifecycleCases() []lifecycleCase {
	afterFence := l0.Add(2 * time.Minute)
	back := detector.Observation{Node: "node-1", Health: detector.Healthy, BootID: "boot-2", Kubelet: detector.KubeletSeen{RenewalSeen: afterFence, StatusSeen: afterFence}}
	sameBoot := back
	sameBoot.BootID = "boot-1"
	renewedOnly := sameBoot
	renewedOnly.Kubelet.StatusSeen = l0
	other := func(nf *v1alpha1.NodeFence) { nf.Status.Leader = "other" }
	person := func(nf *v1alpha1.NodeFence) { nf.Spec.RequestedBy = "alice" }
	force := func(nf *v1alpha1.NodeFence) { nf.Annotations = map[string]string{v1alpha1.ForceAnnotation: "true"} }
	request := func(nf *v1alpha1.NodeFence) {
		nf.Spec.RequestedBy = v1alpha1.RequestedByRemediationPrefix + "NodeHealthCheck (KubefenceRemediation ns/x)"
	}
	storm := decided(policy.Hold, policy.ReasonStorm, "3 of 3 unhealthy")
	fence := decided(policy.Fence, "", "within budget")
	return []lifecycleCase{
		// Before fencing.
		{"a renewal after the recorded one cancels", incidentIn(v1alpha1.PhasePending),
			Facts{Obs: detector.Observation{Health: detector.Healthy, Kubelet: detector.KubeletSeen{RenewTime: l0}}},
			Action{Kind: ActCancel, Life: "its Lease was renewed at 2026-11-24T06:00:00Z, after 2026-11-24T05:59:00Z when the incident opened"}},
		{"a renewal seen after the detection cancels one that recorded none", with(incidentIn(""), func(nf *v1alpha1.NodeFence) { nf.Status.LeaseRenewTime = nil }),
			Facts{Obs: detector.Observation{Health: detector.Suspect, Kubelet: detector.KubeletSeen{RenewalSeen: l0.Add(time.Second)}}},
			Action{Kind: ActCancel, Life: "this replica saw its Lease renewed at 2026-11-24T06:00:01Z, after the detection at 2026-11-24T06:00:00Z"}},
		{"a person's request is not cancelled by life", with(incidentIn(v1alpha1.PhasePending), person),
			Facts{Obs: detector.Observation{Health: detector.Healthy, Kubelet: detector.KubeletSeen{RenewTime: l0}}}, Action{Kind: ActDecide}},
		{"no detection recorded, not unhealthy here: wait for own evidence", with(incidentIn(""), func(nf *v1alpha1.NodeFence) { nf.Status.Timeline = nil }),
			Facts{Obs: detector.Observation{Health: detector.Healthy, Kubelet: detector.KubeletSeen{RenewTime: l0.Add(-time.Minute)}}}, Action{Kind: ActRecheck, After: HoldRecheck}},
		{"no decision yet", incidentIn(v1alpha1.PhasePending), Facts{Obs: unhealthy}, Action{Kind: ActDecide}},
		{"wait until the decision says", incidentIn(v1alpha1.PhasePending),
			Facts{Now: l0, Obs: unhealthy, Decision: &policy.Decision{Verdict: policy.Wait, Reason: policy.ReasonRateLimited, Message: "m", Until: l0.Add(5 * time.Second)}},
			Action{Kind: ActNotYet, Phase: v1alpha1.PhasePending, Record: true, After: 5 * time.Second,
				Decision: policy.Decision{Verdict: policy.Wait, Reason: policy.ReasonRateLimited, Message: "m", Until: l0.Add(5 * time.Second)}}},
		{"a hold that changes nothing is not recorded again", with(incidentIn(v1alpha1.PhaseHeld), func(nf *v1alpha1.NodeFence) { nf.Status.Message = storm.Message }),
			Facts{Obs: unhealthy, Decision: storm}, Action{Kind: ActNotYet, Phase: v1alpha1.PhaseHeld, After: HoldRecheck, Decision: *storm}},
		{"a hold that lifts sooner than the recheck is looked at again when it lifts", with(incidentIn(v1alpha1.PhaseHeld), func(nf *v1alpha1.NodeFence) { nf.Status.Message = "replica" }),
			Facts{Now: l0, Obs: unhealthy, Decision: &policy.Decision{Verdict: policy.Hold, Reason: policy.ReasonControllerHere, Message: "replica", Until: l0.Add(700 * time.Millisecond)}},
			Action{Kind: ActNotYet, Phase: v1alpha1.PhaseHeld, After: 700 * time.Millisecond,
				Decision: policy.Decision{Verdict: policy.Hold, Reason: policy.ReasonControllerHere, Message: "replica", Until: l0.Add(700 * time.Millisecond)}}},
		{"a hold that lifts later than the recheck is looked at again at the recheck", with(incidentIn(v1alpha1.PhaseHeld), func(nf *v1alpha1.NodeFence) { nf.Status.Message = "maintenance" }),
			Facts{Now: l0, Obs: unhealthy, Decision: &policy.Decision{Verdict: policy.Hold, Reason: policy.ReasonMaintenance, Message: "maintenance", Until: l0.Add(time.Minute)}},
			Action{Kind: ActNotYet, Phase: v1alpha1.PhaseHeld, After: HoldRecheck,
				Decision: policy.Decision{Verdict: policy.Hold, Reason: policy.ReasonMaintenance, Message: "maintenance", Until: l0.Add(time.Minute)}}},
		{"dry run holds", incidentIn(v1alpha1.PhasePending), Facts{Obs: unhealthy, Decision: decided(policy.WouldFence, policy.ReasonDryRun, "dry")},
			Action{Kind: ActNotYet, Phase: v1alpha1.PhaseHeld, Record: true, After: HoldRecheck, Decision: *decided(policy.Hold, policy.ReasonDryRun, "dry")}},
		{"forced in dry run, held by a storm", with(incidentIn(v1alpha1.PhaseHeld), force), Facts{Obs: unhealthy, Identity: "me", Decision: storm, DryRun: true},
			Action{Kind: ActNotYet, Phase: v1alpha1.PhaseHeld, Decision: *storm, After: HoldRecheck, Record: true}},
		{"forced past a storm", with(incidentIn(v1alpha1.PhaseHeld), force), Facts{Obs: unhealthy, Identity: "me", Decision: storm},
			Action{Kind: ActStartFencing, Decision: policy.Decision{Verdict: policy.Fence, Message: "forced past " + policy.ReasonStorm},
				Forced: policy.ReasonStorm + " overridden by " + v1alpha1.ForceAnnotation + "=true: 3 of 3 unhealthy"}},
		{"force does not override a pause", with(incidentIn(v1alpha1.PhaseHeld), force), Facts{Obs: unhealthy, Decision: decided(policy.Hold, policy.ReasonPaused, "paused")},
			Action{Kind: ActNotYet, Phase: v1alpha1.PhaseHeld, Record: true, After: HoldRecheck, Decision: *decided(policy.Hold, policy.ReasonPaused, "paused")}},
		{"fence on own evidence", incidentIn(v1alpha1.PhasePending), Facts{Obs: unhealthy, Identity: "me", Decision: fence},
			Action{Kind: ActStartFencing, Decision: *fence}},
		{"adopted evidence is read live first", with(incidentIn(v1alpha1.PhasePending), other), Facts{Obs: unhealthy, Identity: "me", Decision: fence},
			Action{Kind: ActConfirmLive}},
		{"adopted evidence, renewed since: cancel", with(incidentIn(v1alpha1.PhasePending), other), Facts{Obs: unhealthy, Identity: "me", Decision: fence, Live: live("renewed")},
			Action{Kind: ActCancel, Life: "renewed"}},
		{"adopted evidence, still silent: fence", with(incidentIn(v1alpha1.PhaseHeld), other), Facts{Obs: unhealthy, Identity: "me", Decision: fence, Live: live("")},
			Action{Kind: ActStartFencing, Decision: *fence}},
		{"a person's adopted request is not read live", with(with(incidentIn(v1alpha1.PhasePending), other), person), Facts{Obs: unhealthy, Identity: "me", Decision: fence},
			Action{Kind: ActStartFencing, Decision: *fence}},
		{"nobody wrote it: read live first", with(incidentIn(v1alpha1.PhasePending), func(nf *v1alpha1.NodeFence) { nf.Status.Leader = "" }),
			Facts{Obs: unhealthy, Identity: "me", Decision: fence}, Action{Kind: ActConfirmLive}},
		{"created here after a live read: fence", with(incidentIn(v1alpha1.PhasePending), func(nf *v1alpha1.NodeFence) { nf.Status.Leader = "" }),
			Facts{Obs: unhealthy, Identity: "me", Decision: fence, CreatedHere: true}, Action{Kind: ActStartFencing, Decision: *fence}},
		// Outlived: another incident of the node ended on proof of life after this one
		// opened, or a health checker's request's node booted anew.
		{"outlived, own: cancel", incidentIn(v1alpha1.PhasePending), Facts{Obs: unhealthy, Decision: fence, Superseded: "incident x recovered"},
			Action{Kind: ActCancel, Life: "incident x recovered"}},
		{"outlived, a request: cancel", with(incidentIn(v1alpha1.PhaseHeld), request), Facts{Obs: unhealthy, Decision: fence, Superseded: "incident x recovered"},
			Action{Kind: ActCancel, Life: "incident x recovered"}},
		{"outlived, a person's: held", with(incidentIn(v1alpha1.PhasePending), person), Facts{Obs: unhealthy, Decision: fence, Superseded: "incident x recovered"},
			Action{Kind: ActNotYet, Phase: v1alpha1.PhaseHeld, Record: true, After: HoldRecheck, Decision: *decided(policy.Hold, ReasonOutlived,
				"incident x recovered; set "+v1alpha1.ForceAnnotation+"=true on it to fence the node anyway, or delete it")}},
		{"outlived, a person's, forced", with(with(incidentIn(v1alpha1.PhaseHeld), person), force), Facts{Obs: unhealthy, Decision: fence, Superseded: "incident x recovered"},
			Action{Kind: ActStartFencing, Decision: *fence}},
		{"a request's node booted anew: cancel", with(incidentIn(v1alpha1.PhaseHeld), request), Facts{Obs: back, Decision: fence},
			Action{Kind: ActCancel, Life: "the node booted anew (boot boot-2) since the request was decided on boot boot-1"}},
		{"a person's request, node booted anew: stands", with(incidentIn(v1alpha1.PhaseHeld), person), Facts{Obs: back, Decision: fence},
			Action{Kind: ActStartFencing, Decision: *fence}},
		{"outlived once fencing began: fence on", incidentIn(v1alpha1.PhaseFencing), Facts{Obs: unhealthy, Superseded: "incident x recovered"},
			Action{Kind: ActFence}},
		// Fencing and release.
		{"fencing", incidentIn(v1alpha1.PhaseFencing), Facts{Obs: back}, Action{Kind: ActFence}},
		{"fenced", incidentIn(v1alpha1.PhaseFenced), Facts{Obs: back}, Action{Kind: ActRelease}},
		// After the release.
		{"unhealthy again: pods bound since are released", incidentIn(v1alpha1.PhaseRemediated), Facts{Obs: unhealthy, Strategy: v1alpha1.StrategyBoth}, Action{Kind: ActReleaseLate}},
		{"out-of-service: Kubernetes releases them", incidentIn(v1alpha1.PhaseRemediated), Facts{Obs: unhealthy, Strategy: v1alpha1.StrategyOutOfServiceTaint}, Action{Kind: ActNothing}},
		{"unhealthy on a new boot: recovery's", incidentIn(v1alpha1.PhaseRemediated),
			Facts{Obs: detector.Observation{Health: detector.Unhealthy, BootID: "boot-2"}, Strategy: v1alpha1.StrategyBoth}, Action{Kind: ActNothing}},
		{"back on a new boot", incidentIn(v1alpha1.PhaseRemediated), Facts{Obs: back, Ready: true}, Action{Kind: ActRecover}},
		{"back but not Ready", incidentIn(v1alpha1.PhaseRemediated), Facts{Obs: back}, Action{Kind: ActNothing}},
		{"suspect", incidentIn(v1alpha1.PhaseRemediated), Facts{Obs: detector.Observation{Health: detector.Suspect, BootID: "boot-2"}, Ready: true}, Action{Kind: ActNothing}},
		{"no boot ID", incidentIn(v1alpha1.PhaseRemediated), Facts{Obs: detector.Observation{Health: detector.Healthy}, Ready: true}, Action{Kind: ActNothing}},
		{"same boot, renewing and posting after the fence", incidentIn(v1alpha1.PhaseRemediated), Facts{Obs: sameBoot, Ready: true}, Action{Kind: ActContradict}},
		{"same boot, contradiction raised already", with(incidentIn(v1alpha1.PhaseRemediated), func(nf *v1alpha1.NodeFence) {
			nf.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionContradiction, Status: metav1.ConditionTrue}}
		}), Facts{Obs: sameBoot, Ready: true}, Action{Kind: ActNothing}},
		{"same boot, a renewal but no status since the fence", incidentIn(v1alpha1.PhaseRemediated), Facts{Obs: renewedOnly, Ready: true}, Action{Kind: ActNothing}},
		{"same boot, nothing seen (a takeover)", incidentIn(v1alpha1.PhaseRemediated),
			Facts{Obs: detector.Observation{Health: detector.Healthy, BootID: "boot-1"}, Ready: true}, Action{Kind: ActNothing}},
		// Ended.
		{"recovered", incidentIn(v1alpha1.PhaseRecovered), Facts{Obs: unhealthy}, Action{Kind: ActNothing}},
		{"failed", incidentIn(v1alpha1.PhaseFailed), Facts{Obs: unhealthy}, Action{Kind: ActNothing}},
		{"cancelled", incidentIn(v1alpha1.PhaseCancelled), Facts{Obs: unhealthy}, Action{Kind: ActNothing}},
	}
}

// TestLifecycle runs lifecycleCases, and checks that each move an action asks for is one
// CanMove allows.
func TestLifecycle(t *testing.T) {
	for _, tc := range lifecycleCases() {
		t.Run(tc.name, func(t *testing.T) {
			from := tc.nf.Status.Phase
			got := Lifecycle(tc.nf, tc.f)
			if got != tc.want {
				t.Errorf("Lifecycle =\n\t%+v\nwant\n\t%+v", got, tc.want)
			}
			for _, to := range moves(got) {
				if !CanMove(from, to) {
					t.Errorf("%s asks to move %q → %s, which CanMove refuses", got.Kind, from, to)
				}
			}
		})
	}
}

// moves are the phases an action can move an incident to.
func moves(a Action) []v1alpha1.Phase {
	switch a.Kind {
	case ActCancel:
		return []v1alpha1.Phase{v1alpha1.PhaseCancelled}
	case ActNotYet:
		return []v1alpha1.Phase{a.Phase}
	case ActStartFencing:
		return []v1alpha1.Phase{v1alpha1.PhaseFencing}
	case ActFence:
		return []v1alpha1.Phase{v1alpha1.PhaseFenced, v1alpha1.PhaseFailed}
	case ActRelease:
		return []v1alpha1.Phase{v1alpha1.PhaseRemediated}
	case ActRecover:
		return []v1alpha1.Phase{v1alpha1.PhaseRecovered}
	}
	return nil
}

// TestLifecycleCoversEveryAction: the table asks for each Act and starts from each phase;
// a new Act or phase needs rows in lifecycleCases.
func TestLifecycleCoversEveryAction(t *testing.T) {
	acts := map[Act]bool{}
	phases := map[v1alpha1.Phase]bool{}
	for _, tc := range lifecycleCases() {
		phases[tc.nf.Status.Phase] = true
		acts[tc.want.Kind] = true
	}
	for _, a := range []Act{ActNothing, ActRecheck, ActDecide, ActConfirmLive, ActCancel, ActNotYet, ActStartFencing, ActFence,
		ActRelease, ActReleaseLate, ActContradict, ActRecover} {
		if !acts[a] {
			t.Errorf("no row asks for %s", a)
		}
	}
	for _, p := range allPhases {
		if !phases[p] {
			t.Errorf("no row starts in phase %q", p)
		}
	}
}
