package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
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
	sc.setDefaults()
	return sc
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
