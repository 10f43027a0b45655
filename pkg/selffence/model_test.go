package selffence

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// The model: n nodes, each with an agent, a watchdog and a kubelet, and a controller,
// driven in steps of 50ms of real time for two minutes. Node 0 is the one the controller
// wants fenced. Every epoch (2 to 42 s) the world changes at random (see epoch): which
// nodes reach the API server, and which pairs of nodes reach each other. Every agent
// runs on its own clock (rate off by up to 1%), as does the controller and each watchdog.
//
// Agents (model_agent_test.go) read the open NodeFences and the members every read period
// while they reach the API server (a quorum read: what existed when the read began; one
// in ten fails anyway, as a read that times out does), ping every peer every ping period
// (a ping and its answer take up to half a second each; the answer carries what the
// peer knew when the ping arrived, or "don't know" before its first read), report every report period, and feed every third
// of the timeout while Live allows. Agents are stopped (SIGTERM) and killed, one by one
// as a rollout does, or for good, and come back with nothing but the countdown. A node
// whose watchdog runs out is dead until it boots again, 30 to 60 s later.
//
// The controller opens a NodeFence for node 0 at a random moment while it reaches the
// API server; it may close again (a level that failed, a person's word), and it closes
// when node 0 boots again; a second one may follow. The controller observes the reports
// when it reaches the API server, each holder from when it first saw it hold the
// NodeFence until a report of it stops doing so, node 0's kubelet renewals and the
// goodbye of its agent, and asks Verify every step. The two sins: Verify says Verified
// while node 0 lives, or a node whose own read is fresh and shows no NodeFence of it
// stops feeding because of one (a healthy node reset).

// modelRules turns on, one at a time, the rules the model must catch as wrong.
type modelRules struct {
	relayByNode      bool // relays name nodes, and a relayed one counts before a fresh read
	answerBeforeRead bool // a restarted agent answers before its first read, and counts
	ownListExpires   bool // an agent stops passing on its own list once older than isolation
	disarmUnreported bool // a stopped agent disarms without a last report
	trustQuiet       bool // the controller ignores the kubelet's life and the goodbye after the report
}

type modelIncident struct {
	id              string
	node            string
	created, closed float64 // real; closed -1 while open
	visible         time.Time
	held            map[string]time.Time
	verified        bool
	followed        bool // a second incident was considered once this one closed
}

func (i *modelIncident) openAt(real float64) bool {
	return real >= i.created && (i.closed < 0 || real < i.closed)
}

type modelReport struct {
	seq   int
	armed bool
	boot  int
	holds []string
}

// modelEvent stops (term) or kills agent k at at; it comes back after back, or never (-1).
type modelEvent struct {
	at   float64
	k    int
	term bool
	back float64
}

type modelWorld struct {
	rng                            *rand.Rand
	rules                          modelRules
	n                              int
	names                          []string
	timeout, isolation             time.Duration
	readEvery, pingEvery, repEvery float64
	agents                         []*modelAgent
	api                            []bool
	link                           [][]bool
	t0                             time.Time
	ctlRate                        float64
	incidents                      []*modelIncident
	events                         []modelEvent
	boots                          []int
	reports                        []modelReport // the latest each agent wrote
	left                           []float64     // when the seat last heard each agent leave
	seq                            int
	fenceAt                        float64 // when node 0's next NodeFence opens; -1 for none
	// readFails are the agents whose reads and report writes fail though they reach the
	// API server (a LIST that times out, a refused request).
	readFails []bool
	// plan, when set, scripts the world: it sets the links, reads and stops each step, and
	// nothing happens at random but the controller's reach in an outage.
	plan func(w *modelWorld, real float64)
}

// delay is how long a ping or an answer takes: up to half a second, or a hundredth in a
// scripted world.
func (w *modelWorld) delay() float64 {
	if w.plan != nil {
		return 0.01
	}
	return w.rng.Float64() / 2
}

func (w *modelWorld) local(k int, real float64) time.Time {
	return w.t0.Add(time.Duration(real * w.agents[k].rate * float64(time.Second)))
}

func (w *modelWorld) ctl(real float64) time.Time {
	return w.t0.Add(time.Duration(real * w.ctlRate * float64(time.Second)))
}

// epoch changes the world: at random, a rack cut off (a group of nodes that reach each
// other but neither the API server nor anyone else), an API server outage that every node
// sees, or any mix of links.
func (w *modelWorld) epoch() {
	switch w.rng.IntN(3) {
	case 0:
		group := make([]bool, w.n)
		for k := range w.n {
			group[k] = w.rng.IntN(2) == 0
		}
		for k := range w.n {
			w.api[k] = !group[k]
			for m := range k {
				up := group[k] == group[m]
				w.link[k][m], w.link[m][k] = up, up
			}
		}
	case 1:
		for k := range w.n {
			w.api[k] = false
			for m := range k {
				w.link[k][m], w.link[m][k] = true, true
			}
		}
	default:
		for k := range w.n {
			w.api[k] = w.rng.IntN(3) != 0
			for m := range k {
				up := w.rng.IntN(3) != 0
				w.link[k][m], w.link[m][k] = up, up
			}
		}
	}
}

// schedule draws the agents' stops: a rollout, node 0's agent stopped for good, kills.
func (w *modelWorld) schedule() {
	rng := w.rng
	if rng.IntN(3) == 0 {
		t := 5 + rng.Float64()*65
		for _, k := range rng.Perm(w.n) {
			w.events = append(w.events, modelEvent{at: t, k: k, term: true, back: 0.5 + rng.Float64()*3.5})
			t += 1 + rng.Float64()*4
		}
	}
	if rng.IntN(4) == 0 {
		w.events = append(w.events, modelEvent{at: 5 + rng.Float64()*75, k: 0, term: true, back: -1})
	}
	if rng.IntN(3) == 0 {
		for range 1 + rng.IntN(3) {
			w.events = append(w.events, modelEvent{at: 5 + rng.Float64()*95, k: rng.IntN(w.n), back: 0.5 + rng.Float64()*9.5})
		}
	}
	slices.SortFunc(w.events, func(a, b modelEvent) int { return int((a.at - b.at) * 1e6) })
}

func (w *modelWorld) writeReport(k int, real float64, armed bool) {
	a := w.agents[k]
	w.seq++
	r := modelReport{seq: w.seq, armed: armed, boot: w.boots[k]}
	for _, e := range a.read {
		r.holds = append(r.holds, e.id)
	}
	w.reports[k] = r
}

// modelMsg is a ping on its way to a peer, or an answer on its way back.
type modelMsg struct {
	at     float64 // real arrival
	from   int
	to     int
	gen    int       // the pinging process
	pinged time.Time // on the pinger's clock
	answer bool
	fenced []entry
}

func newModelWorld(rng *rand.Rand, p Params, rules modelRules) *modelWorld {
	w := &modelWorld{rng: rng, rules: rules, n: 3 + rng.IntN(5), t0: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)}
	w.timeout = time.Duration(1+rng.IntN(5)) * time.Second
	w.isolation = p.Isolation
	w.readEvery, w.pingEvery, w.repEvery = 0.5+rng.Float64()*2.5, 0.2+rng.Float64()*1.8, 0.5+rng.Float64()*4.5
	w.api = make([]bool, w.n)
	w.link = make([][]bool, w.n)
	w.ctlRate = 1 + (rng.Float64()*2-1)*0.01
	w.boots, w.reports, w.left, w.readFails = make([]int, w.n), make([]modelReport, w.n), make([]float64, w.n), make([]bool, w.n)
	w.fenceAt = 10 + rng.Float64()*50
	for k := range w.n {
		w.names = append(w.names, fmt.Sprintf("node-%d", k))
		w.link[k] = make([]bool, w.n)
		a := &modelAgent{rate: 1 + (rng.Float64()*2-1)*0.01, feedRate: 1 + (rng.Float64()*2-1)*0.01,
			nextRead: rng.Float64(), nextPing: rng.Float64(), nextRep: rng.Float64(), backAt: -1}
		a.restart()
		w.agents = append(w.agents, a)
		w.left[k] = -1
	}
	// Everyone starts connected, read once, armed and fed, until the first epoch.
	for k, a := range w.agents {
		w.api[k] = true
		for m := range k {
			w.link[k][m], w.link[m][k] = true, true
		}
		w.doRead(k, 0)
		a.armed = true
	}
	w.schedule()
	return w
}
