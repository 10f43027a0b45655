package nodeview

import (
	"sync"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/policy"
)

// Admission makes a fence decision and its share of the budget one step. Workers decide
// on different nodes at once, and the informer cache shows a decision only once its
// Fencing write has come back through the watch: two workers that read the cache before
// either write lands would each see the other's node as not fencing, and together start
// more fences than maxConcurrent, the rate limit or "one control-plane node at a time"
// allow. So a decision reads the fencing facts (which nodes are fencing, when fences
// started) under one lock, together with the fences this replica decided on that the
// cache does not show yet (its claims), and a Fence verdict is claimed before the lock
// is released.
//
// A claim ends when the cache shows its incident past Pending and Held (the Fencing
// write, or a later one, came back), when the incident is decided again (its new
// decision stands for it) or when it is deleted. A claim that outlives its fence only
// counts one fence too many, which holds fencing back and never lets more through.
// The zero Admission has no claims.
type Admission struct {
	mu     sync.Mutex
	claims map[string]claim // by incident name
}

type claim struct {
	node string
	at   time.Time
}

// Admit is policy's verdict on the incident named incident, of node pn, with cl's
// fencing facts replaced by those read now from the cached incidents and the claims; a
// Fence verdict claims its place in the budget. A dry run's report has no incident ("")
// and claims nothing. The rest of cl (who is unhealthy, suspect, in which zone) comes
// from the detector, which no decision changes, and may be read before.
func (a *Admission) Admit(cached []*v1alpha1.NodeFence, pol *v1alpha1.Policy, pn policy.Node, cl policy.Cluster, incident string, now time.Time) policy.Decision {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.claims, incident)
	fencing, starts := a.fencingFacts(cached, policy.RateWindow(pol.Budget), now)
	d := Decide(pol, pn, cl, fencing, starts, now)
	if d.Verdict == policy.Fence && incident != "" {
		a.claimLocked(incident, pn.Name, now)
	}
	return d
}

// ClaimForced counts a fence a person forced past the budget, which no Fence verdict
// claimed, in the decisions that follow it.
func (a *Admission) ClaimForced(incident, node string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.claimLocked(incident, node, now)
}

func (a *Admission) claimLocked(incident, node string, now time.Time) {
	if a.claims == nil {
		a.claims = map[string]claim{}
	}
	a.claims[incident] = claim{node: node, at: now}
}

// fencingFacts are the nodes fencing now and the fence starts within window before now,
// from the cached incidents and the claims; a claim the cache has caught up with ends
// here. The caller holds a.mu.
func (a *Admission) fencingFacts(cached []*v1alpha1.NodeFence, window time.Duration, now time.Time) (map[string]bool, []time.Time) {
	fencing, starts := FencingFacts(cached, window, now)
	for _, nf := range cached {
		if _, ok := a.claims[nf.Name]; ok {
			if p := nf.Status.Phase; p != "" && p != v1alpha1.PhasePending && p != v1alpha1.PhaseHeld {
				delete(a.claims, nf.Name)
			}
		}
	}
	for _, cl := range a.claims {
		fencing[cl.node] = true
		if now.Sub(cl.at) <= window {
			starts = append(starts, cl.at)
		}
	}
	return fencing, starts
}

// FencingNow is how many nodes are fencing now, from the cached incidents and the claims.
func (a *Admission) FencingNow(cached []*v1alpha1.NodeFence, now time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	fencing, _ := a.fencingFacts(cached, 0, now)
	return len(fencing)
}

// Unclaim ends the claim of a deleted incident.
func (a *Admission) Unclaim(incident string) {
	a.mu.Lock()
	delete(a.claims, incident)
	a.mu.Unlock()
}
