package selffence

import (
	"slices"
	"time"
)

// The agents of the model (model_test.go): each runs as the node agent does, on its own
// clock, and can be stopped (SIGTERM), killed and started again with nothing kept but
// its watchdog's countdown.

// entry is a NodeFence past its budget as an agent knows it: its node and its UID.
type entry struct{ node, id string }

type modelAgent struct {
	rate     float64 // local seconds per real second
	feedRate float64 // the watchdog's

	// The process: up while it runs; everything below up to the watchdog is lost when it
	// stops.
	up       bool
	gen      int // which process: an answer to a ping of an older one is lost
	readOnce bool
	members  []string
	apiRead  time.Time // local clock
	readAt   float64   // real, of the latest successful read
	read     []entry
	relayed  map[entry]float64 // → arrival (real)
	refuted  map[string]bool   // UIDs a read of its own showed ended
	acks     map[string]time.Time
	stopped  string // why feeding stopped for good

	// The watchdog and the machine.
	armed    bool // the countdown runs
	lastFeed float64
	dead     bool
	backAt   float64 // a dead machine boots again then; an agent stopped starts again (-1: never)

	nextRead, nextPing, nextRep, nextFeed float64
}

// restart is a new agent process: it knows nothing yet.
func (a *modelAgent) restart() {
	a.gen++
	a.up, a.readOnce, a.members, a.apiRead, a.read = true, false, nil, time.Time{}, nil
	a.relayed, a.refuted, a.acks, a.stopped = map[entry]float64{}, map[string]bool{}, map[string]time.Time{}, ""
}

// doRead is a successful quorum read at real: every NodeFence past its budget, and the
// relayed ones that arrived before it began and that it does not list are dropped.
func (w *modelWorld) doRead(k int, real float64) {
	a := w.agents[k]
	a.readOnce, a.members, a.apiRead, a.readAt = true, w.names, w.local(k, real), real
	a.read = nil
	for _, inc := range w.incidents {
		if inc.openAt(real) {
			a.read = append(a.read, entry{node: inc.node, id: inc.id})
		}
	}
	for e, arrived := range a.relayed {
		if arrived < real && !slices.Contains(a.read, e) && !w.rules.relayByNode {
			delete(a.relayed, e)
			a.refuted[e.id] = true
		}
	}
	if w.rules.relayByNode {
		// The old rule: a relayed node is dropped once a read does not show it fenced.
		for e, arrived := range a.relayed {
			if arrived < real && !slices.ContainsFunc(a.read, func(r entry) bool { return r.node == e.node }) {
				delete(a.relayed, e)
			}
		}
	}
}

// answer is what agent m answers a ping at real: nil and false for "don't know".
func (w *modelWorld) answer(m int, real float64) ([]entry, bool) {
	a := w.agents[m]
	if !a.readOnce && !w.rules.answerBeforeRead {
		return nil, false
	}
	var out []entry
	if !w.rules.ownListExpires || w.local(m, real).Sub(a.apiRead) <= w.isolation {
		out = append(out, a.read...)
	}
	for e := range a.relayed {
		out = append(out, e)
	}
	return out, true
}

// hear records agent m's answer, arriving at k at real, to k's ping sent at pinged.
func (w *modelWorld) hear(k, m int, fenced []entry, pinged time.Time, real float64) {
	a := w.agents[k]
	if prev, ok := a.acks[w.names[m]]; !ok || pinged.After(prev) {
		a.acks[w.names[m]] = pinged
	}
	for _, e := range fenced {
		if _, ok := a.relayed[e]; !ok && !a.refuted[e.id] {
			a.relayed[e] = real
		}
	}
}

// view is what Live is told; under the old relay rule a relayed node counts as read.
func (w *modelWorld) view(k int) AgentView {
	a := w.agents[k]
	v := AgentView{Node: w.names[k], Members: a.members, APIRead: a.apiRead, Acks: a.acks}
	for _, e := range a.read {
		v.Read = append(v.Read, e.node)
	}
	for e := range a.relayed {
		v.Relayed = append(v.Relayed, e.node)
	}
	if w.rules.relayByNode {
		v.Read = append(v.Read, v.Relayed...)
	}
	return v
}

// feed asks Live, as the feeder does before every feed. A node whose read of its own is
// fresh and showed no NodeFence of its node, and that still stops because the cluster
// would want it fenced, is a healthy node reset: the first sin.
func (w *modelWorld) feed(k int, real float64) string {
	a := w.agents[k]
	why := Live(w.view(k), w.isolation, w.local(k, real))
	if why == "" {
		a.armed, a.lastFeed = true, real
		return ""
	}
	if !a.armed {
		return "" // not armed yet: it arms once Live allows
	}
	a.stopped = why
	fresh := a.readOnce && w.local(k, real).Sub(a.apiRead) <= w.isolation
	if fresh && !slices.ContainsFunc(a.read, func(e entry) bool { return e.node == w.names[k] }) {
		return "healthy node " + w.names[k] + " stopped feeding (its own read is fresh and shows no NodeFence of it): " + why
	}
	return ""
}

// term is a SIGTERM at real. While the node may live, the agent writes a report that it
// disarms and disarms only once that report is written; a node the cluster wants fenced,
// or that is cut off, keeps counting down. The seat hears the goodbye.
func (w *modelWorld) term(k int, real float64) {
	a := w.agents[k]
	if !a.up {
		return
	}
	a.up = false
	if w.api[k] {
		w.left[k] = real
	}
	if !a.armed || a.stopped != "" || Live(w.view(k), w.isolation, w.local(k, real)) != "" {
		return
	}
	switch {
	case w.rules.disarmUnreported:
		a.armed = false
	case w.api[k]:
		w.writeReport(k, real, false)
		a.armed = false
	}
}

// kill is a SIGKILL (or a crash) of the agent: the countdown runs on.
func (w *modelWorld) kill(k int) { w.agents[k].up = false }
