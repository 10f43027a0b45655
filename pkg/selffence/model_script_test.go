package selffence

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Scripted worlds of the model: the few orders of events that random worlds rarely
// draw, each run under the rules as built and under the one wrong rule it is about.

// scriptedWorld is three nodes (node 0, the one fenced; 1 and 2, its peers), connected,
// reading every second, pinging every 100ms, reporting every 500ms, clocks as given; its
// NodeFence opens at 16s. plan scripts the rest.
func scriptedWorld(rules modelRules, isolation time.Duration, rates [3]float64, plan func(w *modelWorld, real float64)) *modelWorld {
	w := &modelWorld{rng: rand.New(rand.NewPCG(41, 2026)), rules: rules, n: 3, t0: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC),
		timeout: time.Second, isolation: isolation, readEvery: 1, pingEvery: 0.1, repEvery: 0.5, ctlRate: 1, fenceAt: 15.98, plan: plan}
	w.api, w.link = make([]bool, 3), make([][]bool, 3)
	w.boots, w.reports, w.left, w.readFails = make([]int, 3), make([]modelReport, 3), make([]float64, 3), make([]bool, 3)
	for k := range 3 {
		w.names = append(w.names, []string{"node-0", "node-1", "node-2"}[k])
		w.link[k] = []bool{true, true, true}
		w.api[k], w.left[k] = true, -1
		a := &modelAgent{rate: rates[k], feedRate: 1, nextRead: 0.09, nextPing: 0, nextRep: 0.29, backAt: -1}
		a.restart()
		w.agents = append(w.agents, a)
		w.doRead(k, 0)
		a.armed = true
	}
	return w
}

// at says whether the step at real is the one at x: steps are 50ms apart.
func at(real, x float64) bool { return real >= x && real < x+0.05 }

// cut sets the link between nodes k and m.
func (w *modelWorld) cut(k, m int, down bool) { w.link[k][m], w.link[m][k] = !down, !down }

// restartedHolder: node 0 loses the API server and its peers just before its NodeFence
// opens; nodes 1 and 2 read and report it (the controller's majority). Node 1's agent is
// then restarted and cannot read (nor write) the NodeFences, and node 0 reaches it again.
// Node 1's answer before its first read must not count: without a read it knows nothing,
// and counted, it keeps node 0 alive with a majority of two of three past V + isolation.
func restartedHolder(rules modelRules) *modelWorld {
	return scriptedWorld(rules, 6*time.Second, [3]float64{1, 1, 1}, func(w *modelWorld, real float64) {
		switch {
		case at(real, 15):
			w.api[0] = false
			w.cut(0, 1, true)
			w.cut(0, 2, true)
			w.cut(1, 2, true)
		case at(real, 18):
			w.kill(1)
			w.agents[1].backAt = real + 0.05
			w.readFails[1] = true
		case at(real, 18.1):
			w.cut(0, 1, false)
		}
	})
}

// expiredOwnList: node 0 pings its peers once more right after its NodeFence opens and
// before they read it, then loses them and the API server; they read and report it and
// then lose the API server too. Node 0's clock runs 1% slow and theirs 1% fast. Once
// node 0 reaches them again, their own reads are older than isolation: were they to stop
// passing on their own lists then, their answers would no longer carry node 0's
// NodeFence, and node 0 would live on forever on them.
func expiredOwnList(rules modelRules) *modelWorld {
	return scriptedWorld(rules, 15*time.Second, [3]float64{0.99, 1.01, 1.01}, func(w *modelWorld, real float64) {
		switch {
		case at(real, 15.7):
			w.api[0] = false
			w.cut(1, 2, true)
		case at(real, 16.08):
			w.cut(0, 1, true)
			w.cut(0, 2, true)
		case at(real, 16.45):
			w.api[1], w.api[2] = false, false
		case at(real, 30.99):
			w.cut(0, 1, false)
			w.cut(0, 2, false)
		}
	})
}

// TestSelfFenceModelScripted: the scripted worlds keep both sins away under the rules as
// built, and the wrong rule each is about commits one.
func TestSelfFenceModelScripted(t *testing.T) {
	p := func(w *modelWorld) Params { return Params{Isolation: w.isolation, ReportMaxAge: time.Hour} }
	for name, tc := range map[string]struct {
		world func(modelRules) *modelWorld
		wrong modelRules
		sin   string
	}{
		"a restarted holder answers before its first read": {restartedHolder, modelRules{answerBeforeRead: true}, "verified at"},
		"agents stop passing on their own lists":           {expiredOwnList, modelRules{ownListExpires: true}, "verified at"},
	} {
		t.Run(name, func(t *testing.T) {
			w := tc.world(modelRules{})
			verified, sin := w.run(p(w), Verify)
			if sin != "" || !verified {
				t.Errorf("as built: verified %t, sin %q; want node 0 counted fenced once dead, and no sin", verified, sin)
			}
			w = tc.world(tc.wrong)
			if _, sin := w.run(p(w), Verify); !strings.Contains(sin, tc.sin) {
				t.Errorf("with the wrong rule: sin %q, want one saying %q", sin, tc.sin)
			} else {
				t.Logf("with the wrong rule: %s", sin)
			}
		})
	}
}
