package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/testpoint"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// GenerateChaos returns the scenario a seed stands for: the same seed always gives the
// same cluster, steps and timings, so a failing seed replays exactly (the processes' own
// timing still varies, as it would on real machines). Every generated scenario kills or
// cuts off web-0's node and stirs one more fault into the fence; kubefence must still
// release web-0, only after a verified fence, and touch nothing else.
func GenerateChaos(seed uint64) *Scenario {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	sc := &Scenario{
		Name:        fmt.Sprintf("chaos-%d", seed),
		Nodes:       3 + rng.IntN(3),
		Controllers: 1 + rng.IntN(2),
		Profile:     ProfileFast,
	}
	sc.Description = fmt.Sprintf("generated from seed %d", seed)
	sc.StatefulSet = StatefulSetSpec{Name: "web", Replicas: 1 + rng.IntN(sc.Nodes-2)}
	sc.BMC.OffDelay = secs(rng.IntN(4))
	fault := ActPartition
	if rng.IntN(10) < 3 {
		fault = ActPowerLoss
	}
	sc.Steps = append(sc.Steps, Step{At: secs(rng.IntN(3)), Action: fault, Node: "@web-0"})
	sc.Steps = append(sc.Steps, chaosDisruption(rng, sc, fault)...)
	final := v1alpha1.PhaseRemediated
	if rng.IntN(10) < 3 {
		final = v1alpha1.PhaseRecovered
		sc.Steps = append(sc.Steps, Step{Action: ActPowerOn, Node: "@web-0",
			Until: &Condition{Node: "@web-0", Phase: string(v1alpha1.PhaseRemediated)}})
	}
	// Drawn after everything above, so that every seed keeps the scenario it had and only
	// gains these. A budget with no disruption left shrinks the wait to a minWait far
	// below the evidence floor, and controllers restarted mid-incident start with fresh
	// clocks: the checker's renewal rule must still hold for every node.
	if rng.IntN(3) == 0 {
		sc.StatefulSet.Guarded = true
		sc.Policy = map[string]any{"minWait": "500ms"}
	}
	if rng.IntN(4) == 0 {
		sc.Steps = append(sc.Steps, Step{After: Duration{time.Duration(rng.IntN(6000)) * time.Millisecond}, Action: ActRestartControllers})
	}
	sc.Expect = Expect{
		Incidents: []IncidentExpect{{Node: "@web-0", Phase: string(final)}},
		Moved:     []string{"web-0"},
	}
	// Drawn after everything above too: recovery under a leader that stops itself before
	// its Unfence, a mapping edited mid-fence, and a storage fence whose node recovers and
	// fails again while the leader that fenced it first sleeps.
	switch rng.IntN(6) {
	case 0:
		if final == v1alpha1.PhaseRecovered {
			sc.Controllers, sc.PauseAt = 2, testpoint.BeforeUnfence
			sc.Steps = append(sc.Steps, Step{Action: ActResumePaused, Until: &Condition{Node: "@web-0", Phase: string(final)}})
		}
	case 1:
		if fault == ActPartition {
			// While the BMC takes its time to power off, the node's mapping is edited to
			// name a spare switched-off BMC: a read back of it would verify a running node.
			sc.BMC.OffDelay = Duration{max(sc.BMC.OffDelay.Duration, 2*time.Second)}
			edit := Step{Action: ActEditTarget, Node: "@web-0", Until: &Condition{Node: "@web-0", BMC: bmc.ActionOffRequested}}
			sc.Steps = slices.Insert(sc.Steps, 1, edit)
		}
	case 2:
		refence(sc)
	}
	lostOutcome(rng, sc, fault)
	if rng.IntN(5) == 0 {
		mappingEdited(sc)
	}
	sc.setDefaults()
	return sc
}

// mappingEdited edits web-0's node mapping to name a spare, switched-off BMC (another
// machine's) after the controller started and before the node fails, between two rounds
// of the device monitor: the device must prove it is the node's before the first off, so
// the incident is held (TargetMismatch), and nothing is powered off or released, where
// "already off, nothing sent" once verified a running node.
func mappingEdited(sc *Scenario) {
	if sc.Storage != "" || len(sc.Steps) == 0 {
		return
	}
	sc.Steps = []Step{{Action: ActEditTarget, Node: "@web-0"}, sc.Steps[0]}
	sc.PauseAt = ""
	sc.Expect = Expect{
		Incidents:     []IncidentExpect{{Node: "@web-0", Phase: string(v1alpha1.PhaseHeld), Message: v1alpha1.ReasonTargetMismatch}},
		NothingFenced: true,
		Hold:          secs(10),
	}
}

// lostOutcome, drawn after everything else, loses the outcome of the Fence call against
// a slow BMC: the leader hands over cleanly while the BMC holds the off (3 s), or its
// save right after the call fails (45 s: past the API server's restart and a takeover,
// and within the level's 60 s timeout, the longest the read back waits).
// The call's outcome is unknown: it must be read back, and no second off sent while the
// first may still land (the checker's one-off-at-a-time rule).
func lostOutcome(rng *rand.Rand, sc *Scenario, fault string) {
	if fault != ActPartition || sc.Storage != "" || sc.PauseAt != "" {
		return
	}
	slow := Duration{max(sc.BMC.OffDelay.Duration, 3*time.Second)}
	switch rng.IntN(4) {
	case 0:
		sc.Controllers, sc.BMC.OffDelay = 2, slow
		stop := Step{Action: ActStopLeader, Until: &Condition{Node: "@web-0", BMC: bmc.ActionOffRequested}}
		sc.Steps = slices.Insert(sc.Steps, 1, stop)
	case 1:
		for _, st := range sc.Steps {
			switch st.Action {
			case ActKillLeader, ActPauseLeader, ActRestartAPIServer, ActRestartControllers:
				return
			}
		}
		// The BMC holds the off through the outage and the API server's start, so the
		// next sync finds the call in flight while it may still land.
		sc.Controllers, sc.BMC.OffDelay, sc.PauseAt = 2, secs(45), testpoint.AfterFenceCall
		sc.Steps = slices.Insert(sc.Steps, 1, Step{Action: ActFailSave, DownFor: secs(1)})
	}
}

// refence makes sc a storage fence the node needs twice: its initiator is cut from its
// target on a real tgtd (the machine keeps running), the node comes back on a new boot,
// and the first replica stops itself right before its recovery's Unfence. The standby
// recovers the node, which is cut off again at once and fenced by a new incident; then
// the stopped replica is resumed. Its late Unfence must not give the node its storage
// back on the boot the new incident fenced (the checker's restore rule).
func refence(sc *Scenario) {
	sc.Storage, sc.Controllers, sc.PauseAt = "iscsi", 2, testpoint.BeforeUnfence
	sc.BMC.OffDelay = Duration{}
	if sc.Policy == nil {
		sc.Policy = map[string]any{}
	}
	sc.Policy["levels"] = []any{map[string]any{"agents": []any{iscsiAgent}, "timeout": "20s"}}
	sc.Policy["budget"] = map[string]any{"cooldown": "1s"}
	remediated, recovered := string(v1alpha1.PhaseRemediated), string(v1alpha1.PhaseRecovered)
	sc.Steps = []Step{
		{Action: ActPartition, Node: "@web-0"},
		{Action: ActRestart, Node: "@web-0", Until: &Condition{Node: "@web-0", Phase: remediated}},
		{Action: ActPartition, Node: "@web-0", Until: &Condition{Node: "@web-0", Phase: recovered}},
		{Action: ActResumePaused, Until: &Condition{Node: "@web-0", Phase: remediated, Count: 2}},
	}
	sc.Expect = Expect{Incidents: []IncidentExpect{{Node: "@web-0", Phase: remediated}}, Moved: []string{"web-0"}}
}

func secs(n int) Duration { return Duration{time.Duration(n) * time.Second} }

// chaosDisruption picks the extra fault and when it strikes: at a phase of the incident,
// when the BMC accepted the power-off, or a few seconds after the first fault. A machine
// that lost power is already off: its BMC logs no off-request to wait for.
func chaosDisruption(rng *rand.Rand, sc *Scenario, fault string) []Step {
	when := func() Step {
		switch k := rng.IntN(3); {
		case k == 0:
			return Step{Until: &Condition{Node: "@web-0", Phase: string(v1alpha1.PhaseFencing)}}
		case k == 1 && sc.BMC.OffDelay.Duration > 0 && fault == ActPartition:
			return Step{Until: &Condition{Node: "@web-0", BMC: bmc.ActionOffRequested}}
		default:
			return Step{After: Duration{time.Duration(rng.IntN(8000)) * time.Millisecond}}
		}
	}
	switch rng.IntN(6) {
	case 0:
		return nil
	case 1:
		st := when()
		st.Action = ActKillLeader
		return []Step{st}
	case 2:
		st := when()
		st.Action = ActPauseLeader
		return []Step{st, {After: secs(2 + rng.IntN(7)), Action: ActResumePaused}}
	case 3:
		// The agent runs once the fence started.
		return []Step{{Action: ActKillAgent, Until: &Condition{Node: "@web-0", Phase: string(v1alpha1.PhaseFencing)}}}
	case 4:
		st := when()
		st.Action, st.DownFor = ActRestartAPIServer, secs(1+rng.IntN(5))
		return []Step{st}
	default:
		// Another node's kubelet blips, each time for less than the staleness threshold.
		if sc.StatefulSet.Replicas < 2 {
			return nil
		}
		return []Step{{After: Duration{time.Duration(rng.IntN(4000)) * time.Millisecond}, Action: ActFlap,
			Node: "@web-1", Count: 1 + rng.IntN(2), Down: secs(2), Up: secs(2)}}
	}
}
