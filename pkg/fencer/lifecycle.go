package fencer

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/policy"
)

// Lifecycle is the whole life of an incident: given its status and what the controller
// observed, it says what to do next. It does no I/O and changes nothing but a fresh
// incident's BootID: the boot the node had when the incident was decided, which recovery
// waits to see replaced. The controller carries out the Action and, for Decide and
// ConfirmLive, fills the Facts it asked for and asks again. Every state an incident can
// be in and every way out of it:
//
//	"", Pending, Held  outlived: another incident ended since on proof of  Cancel → Cancelled
//	                   life, or a request's node booted anew (own, request)
//	                   outlived, a person's request (not forced)           NotYet → Held
//	                   a sign of life (own incident, no attempt yet)       Cancel → Cancelled
//	                   no detection recorded, node not unhealthy here      Recheck
//	                   policy not asked yet                                Decide
//	                   policy says wait or hold (dry run holds)            NotYet → Pending / Held
//	                   fence, on another replica's evidence (or on an      ConfirmLive
//	                   incident nobody wrote), not read live
//	                   fence, and the live read shows a renewal since      Cancel → Cancelled
//	                   fence (or forced past a budget hold)                StartFencing → Fencing
//	Fencing, Held      a device proved another machine's (Mismatched)      NotYet → Held
//	Fencing            always                                              Fence (Next, Apply) → Fenced / Failed
//	Fenced             always                                              Release → Remediated
//	Remediated         unhealthy again: pods bound since the release       ReleaseLate
//	                   Ready on the fenced boot, renewing and posting      Contradict
//	                   Ready on a new boot                                 Recover → Recovered
//	                   anything else                                       Nothing
//	Recovered, Failed, Cancelled                                           Nothing
//
// The phase moves only as CanMove allows; the controller makes each move in one place.
func Lifecycle(nf *v1alpha1.NodeFence, f Facts) Action {
	switch nf.Status.Phase {
	case "", v1alpha1.PhasePending, v1alpha1.PhaseHeld:
		return decide(nf, f)
	case v1alpha1.PhaseFencing:
		if a, held := mismatchHold(&nf.Status); held {
			return a
		}
		return Action{Kind: ActFence}
	case v1alpha1.PhaseFenced:
		return Action{Kind: ActRelease}
	case v1alpha1.PhaseRemediated:
		return remediated(nf, f)
	}
	return Action{Kind: ActNothing}
}

// Facts is what the controller observed for one turn of the machine.
type Facts struct {
	Now time.Time
	// Obs is the detector's view of the node.
	Obs detector.Observation
	// Ready: the Node's Ready condition is True.
	Ready bool
	// Identity is this replica's. An incident another replica last wrote is adopted: its
	// evidence was gathered by an earlier leader.
	Identity string
	// Strategy is the governing policy's remediation.
	Strategy v1alpha1.RemediationStrategy
	// DryRun: the governing policy (or the whole configuration) runs dry. A force then
	// overrides nothing: a budget rule is checked before dry run, so a storm hold's reason
	// would otherwise hide that the policy must touch nothing.
	DryRun bool
	// Decision is policy's answer for a Pending or Held incident; nil until the machine
	// asks for it (ActDecide).
	Decision *policy.Decision
	// Live is what a read of the node's Lease from the API server showed: a sign of life,
	// or "" for none; nil until the machine asks for it (ActConfirmLive).
	Live *string
	// CreatedHere: this replica created the incident in this sync, right after it read
	// the node's Lease from the API server (an incident no controller has written yet is
	// otherwise adopted: its creator may have stopped before it wrote a thing).
	CreatedHere bool
	// Superseded, when not empty, says that another incident of the node ended after this
	// one opened, on proof that the node lived (Recovered on a new boot, or Cancelled on
	// a sign of life): this one's evidence predates it.
	Superseded string
}

// Act is what the controller does for an incident.
type Act string

const (
	// ActNothing: nothing to do until the node or the incident changes.
	ActNothing Act = "Nothing"
	// ActRecheck: ask again after Action.After.
	ActRecheck Act = "Recheck"
	// ActDecide: ask policy (Facts.Decision) and turn the machine again.
	ActDecide Act = "Decide"
	// ActConfirmLive: read the node's Lease from the API server (Facts.Live) and turn the
	// machine again.
	ActConfirmLive Act = "ConfirmLive"
	// ActCancel: move to Cancelled; Action.Life is the sign of life.
	ActCancel Act = "Cancel"
	// ActNotYet: move to Action.Phase (Pending or Held) for Action.Decision, when
	// Action.Record says the incident's record changes; ask again after Action.After.
	ActNotYet Act = "NotYet"
	// ActStartFencing: record Action.Forced if set, move to Fencing at level 1 for
	// Action.Decision, and fence.
	ActStartFencing Act = "StartFencing"
	// ActFence: run the fencing machine (Next and Apply) until it waits, ends or gives up.
	ActFence Act = "Fence"
	// ActRelease: carry out the remediation, then move to Remediated.
	ActRelease Act = "Release"
	// ActReleaseLate: release pods bound to the fenced node since its release, once every
	// agent that fenced it reads the fence back.
	ActReleaseLate Act = "ReleaseLate"
	// ActContradict: raise ConditionContradiction; nothing is undone.
	ActContradict Act = "Contradict"
	// ActRecover: lower a raised contradiction, undo the fence, remove the taints, and
	// move to Recovered.
	ActRecover Act = "Recover"
)

// Action is one thing for the controller to do.
type Action struct {
	Kind Act
	// After is when to ask again (Recheck, NotYet).
	After time.Duration
	// Life is the sign of life that cancels (Cancel).
	Life string
	// Phase is the phase NotYet moves to.
	Phase v1alpha1.Phase
	// Record is true when NotYet changes what the incident says.
	Record bool
	// Decision is policy's answer as it stands (NotYet, StartFencing): a dry run's
	// WouldFence is a Hold, and a forced fence past a budget hold is Fence.
	Decision policy.Decision
	// Forced says what a force annotation overrode (StartFencing); empty when nothing.
	Forced string
}

// HoldRecheck is how often a held or waiting incident asks policy again.
const HoldRecheck = 2 * time.Second

// budgetReasons are the holds and waits a forced incident overrides; pause, exclusion and
// dry run are a person's switches and stand.
var budgetReasons = map[string]bool{
	policy.ReasonStorm: true, policy.ReasonStormPending: true, policy.ReasonZoneDark: true, policy.ReasonCooldown: true, policy.ReasonControlPlane: true,
	policy.ReasonMaxConcurrent: true, policy.ReasonRateLimited: true, policy.ReasonNothingToRelease: true,
	// A person who checked the mapping confirms the fence device is the node's.
	policy.ReasonTargetReadsOff: true,
	// A person who knows the node under maintenance is dead need not wait out the window.
	policy.ReasonMaintenance: true,
}

// decide is the machine for an incident that has not started fencing.
func decide(nf *v1alpha1.NodeFence, f Facts) Action {
	st := &nf.Status
	if st.BootID == "" {
		// The boot the node had when the incident was decided: recovery needs a new one.
		st.BootID = f.Obs.BootID
	}
	if a, held := mismatchHold(st); held {
		// Neither policy nor force moves it: its recorded target is another machine.
		return a
	}
	own := nf.Spec.RequestedBy == v1alpha1.RequestedByController
	request := strings.HasPrefix(nf.Spec.RequestedBy, v1alpha1.RequestedByRemediationPrefix)
	if len(st.Attempts) == 0 {
		if a, stop := outlived(nf, f, own || request); stop {
			return a
		}
	}
	// The controller's own incident ends on a sign of life from the node; a person's
	// request stands until it is fenced or deleted. Evidence recorded by an earlier
	// leader stands too: this replica's restarted clocks are not a sign of life.
	if own && len(st.Attempts) == 0 {
		if life := SignOfLife(nf, f.Obs); life != "" {
			return Action{Kind: ActCancel, Life: life}
		}
		if len(st.Timeline) == 0 && f.Obs.Health != detector.Unhealthy {
			// Created by a replica that stopped before it wrote the detection: there is
			// no recorded evidence to adopt, so this replica's own must say unhealthy
			// (after the evidence floor). Nothing is cancelled meanwhile.
			return Action{Kind: ActRecheck, After: HoldRecheck}
		}
	}
	if f.Decision == nil {
		return Action{Kind: ActDecide}
	}
	d := *f.Decision
	if d.Verdict == policy.WouldFence {
		// An incident in dry run (opened by a person) is held: shadow mode touches nothing.
		d.Verdict = policy.Hold
	}
	forced := ""
	if nf.Annotations[v1alpha1.ForceAnnotation] == "true" && budgetReasons[d.Reason] && d.Verdict != policy.Fence && !f.DryRun {
		forced = fmt.Sprintf("%s overridden by %s=true: %s", d.Reason, v1alpha1.ForceAnnotation, d.Message)
		d = policy.Decision{Verdict: policy.Fence, Message: fmt.Sprintf("forced past %s", d.Reason)}
	}
	if d.Verdict != policy.Fence {
		a := Action{Kind: ActNotYet, Phase: v1alpha1.PhasePending, Decision: d, After: HoldRecheck}
		if d.Verdict == policy.Hold {
			a.Phase = v1alpha1.PhaseHeld
		}
		// Leader is empty until a controller first writes the status (a fresh incident).
		a.Record = st.Phase != a.Phase || st.Message != d.Message || st.Leader == ""
		if left := d.Until.Sub(f.Now); left > 0 && (d.Verdict == policy.Wait || left < a.After) {
			// A wait ends at its time; a hold that lifts by itself sooner than the
			// recheck (a standby replica's renewals lapsing) is looked at again right
			// then, not up to HoldRecheck later.
			a.After = left
		}
		return a
	}
	if own && (adopted(nf, f.Identity) || (st.Leader == "" && !f.CreatedHere)) {
		// Evidence this replica did not gather is checked against the API server once
		// before it fences on it; so is an incident nobody has written, whose creator
		// stopped before its first status write, fenced on this replica's cache.
		if f.Live == nil {
			return Action{Kind: ActConfirmLive}
		}
		if *f.Live != "" {
			return Action{Kind: ActCancel, Life: *f.Live}
		}
	}
	return Action{Kind: ActStartFencing, Decision: d, Forced: forced}
}

// outlived ends or holds an incident that has not started fencing when the node has
// lived past its evidence: another incident of the node ended since this one opened on
// proof that the node lived (Superseded), or, for a health checker's request, the node
// booted anew since the request was decided. The controller's own incidents and health
// checkers' requests are cancelled; a person's request is held until the person forces
// it (ForceAnnotation) or deletes it. stop is false when nothing outlived the incident.
func outlived(nf *v1alpha1.NodeFence, f Facts, cancel bool) (a Action, stop bool) {
	st := &nf.Status
	why := f.Superseded
	if why == "" && strings.HasPrefix(nf.Spec.RequestedBy, v1alpha1.RequestedByRemediationPrefix) &&
		st.BootID != "" && f.Obs.BootID != "" && f.Obs.BootID != st.BootID {
		why = fmt.Sprintf("the node booted anew (boot %s) since the request was decided on boot %s", f.Obs.BootID, st.BootID)
	}
	switch {
	case why == "":
		return Action{}, false
	case cancel:
		return Action{Kind: ActCancel, Life: why}, true
	case nf.Annotations[v1alpha1.ForceAnnotation] == "true":
		return Action{}, false
	}
	d := policy.Decision{Verdict: policy.Hold, Reason: ReasonOutlived,
		Message: fmt.Sprintf("%s; set %s=true on it to fence the node anyway, or delete it", why, v1alpha1.ForceAnnotation)}
	return Action{Kind: ActNotYet, Phase: v1alpha1.PhaseHeld, Decision: d, After: HoldRecheck,
		Record: st.Phase != v1alpha1.PhaseHeld || st.Message != d.Message || st.Leader == ""}, true
}

// ReasonOutlived holds a person's request that the node outlived (outlived).
const ReasonOutlived = "OutlivedByNode"

// remediated is the machine for an incident whose node's workloads were released.
func remediated(nf *v1alpha1.NodeFence, f Facts) Action {
	obs, st := f.Obs, &nf.Status
	if obs.Health == detector.Unhealthy {
		if f.Strategy == v1alpha1.StrategyOutOfServiceTaint || (obs.BootID != "" && obs.BootID != st.BootID) {
			// Kubernetes itself releases an out-of-service node's pods; a new boot is
			// recovery's.
			return Action{Kind: ActNothing}
		}
		return Action{Kind: ActReleaseLate}
	}
	if obs.Health != detector.Healthy || !f.Ready || obs.BootID == "" {
		return Action{Kind: ActNothing}
	}
	if obs.BootID != st.BootID {
		return Action{Kind: ActRecover}
	}
	// Healthy and Ready alone prove nothing here: a new leader restarts the Lease clocks,
	// and kube-controller-manager takes a while to mark a dead node's Ready Unknown. A
	// Lease renewal after the fence is not enough either: a kubelet that just rebooted
	// renews its Lease before it posts the status with its new boot ID. Only one coherent
	// observation proves the same boot ran on: a renewal and a status, both seen by this
	// process after the fence held, the status still carrying the fenced boot ID.
	verified := FenceVerifiedAt(st)
	if verified.IsZero() || !obs.Kubelet.RenewalSeen.After(verified) || !obs.Kubelet.StatusSeen.After(verified) ||
		meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionContradiction) {
		return Action{Kind: ActNothing}
	}
	return Action{Kind: ActContradict}
}

// SignOfLife returns what shows, in obs, that the node lived after its incident opened,
// or "" when nothing does. Only the kubelet's own word counts: a Lease renewTime later
// than the one recorded when the incident opened (both on the kubelet's clock), or, for
// an incident that recorded none, a renewal this replica saw after the detection. A
// Healthy verdict alone is not one: a new leader restarts its Lease clocks, and a dead
// node then looks healthy until its floor passes.
func SignOfLife(nf *v1alpha1.NodeFence, obs detector.Observation) string {
	if rt := nf.Status.LeaseRenewTime; rt != nil {
		if obs.Kubelet.RenewTime.After(rt.Time) {
			return fmt.Sprintf("its Lease was renewed at %s, after %s when the incident opened",
				Stamp(obs.Kubelet.RenewTime), Stamp(rt.Time))
		}
		return ""
	}
	detected := StepTime(nf, v1alpha1.StepDetected)
	if !detected.IsZero() && obs.Kubelet.RenewalSeen.After(detected) {
		return fmt.Sprintf("this replica saw its Lease renewed at %s, after the detection at %s",
			Stamp(obs.Kubelet.RenewalSeen), Stamp(detected))
	}
	if obs.Kubelet.RenewTime.IsZero() && obs.Health == detector.Healthy && !detected.IsZero() {
		// A node without a Lease is judged on Ready alone, and it is True again.
		return "Ready again (the node has no Lease)"
	}
	return ""
}

// adopted reports whether another replica last wrote the incident.
func adopted(nf *v1alpha1.NodeFence, identity string) bool {
	return nf.Status.Leader != "" && nf.Status.Leader != identity
}

// StepTime is when the incident's first step of type typ happened; zero if none.
func StepTime(nf *v1alpha1.NodeFence, typ string) time.Time {
	for _, st := range nf.Status.Timeline {
		if st.Type == typ {
			return st.Time.Time
		}
	}
	return time.Time{}
}

// Stamp formats t as the timeline's messages do.
func Stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// VerifiedAttempts returns the attempts that verified the incident's fence.
func VerifiedAttempts(st *v1alpha1.NodeFenceStatus) []v1alpha1.Attempt {
	var out []v1alpha1.Attempt
	for _, a := range st.Attempts {
		if a.Level == st.VerifiedLevel && a.State == v1alpha1.AttemptVerified {
			out = append(out, a)
		}
	}
	return out
}

// FenceVerifiedAt is when the last of the incident's verified attempts finished, or
// when a person's confirm-off was accepted; zero while its fence is not verified.
func FenceVerifiedAt(st *v1alpha1.NodeFenceStatus) time.Time {
	var at time.Time
	if st.ConfirmedOff != nil {
		at = st.ConfirmedOff.Time.Time
	}
	for _, a := range VerifiedAttempts(st) {
		if a.Finished != nil && a.Finished.After(at) {
			at = a.Finished.Time
		}
	}
	return at
}

// ActionOf is what fencing does to the incident's node: its own action, else its
// policy's; the default, Off, for a policy since removed from the configuration (nil).
func ActionOf(nf *v1alpha1.NodeFence, pol *v1alpha1.Policy) v1alpha1.FenceAction {
	switch {
	case nf.Spec.Action != "":
		return nf.Spec.Action
	case pol != nil && pol.Action != "":
		return pol.Action
	}
	return v1alpha1.ActionOff
}
