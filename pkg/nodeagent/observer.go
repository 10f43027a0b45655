package nodeagent

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"k8s.io/klog/v2"
)

// ObserverPrefix starts the member name of a controller replica among the agents' peers:
// a node's name cannot hold a colon, so no replica is taken for a node.
const ObserverPrefix = "kubefence-controller:"

// Observer is a controller replica's seat among the node agents' peers: it probes and is
// probed like an agent, and learns from SWIM (memberlist's probes, indirect probes
// through other members, and suspicion that the suspect may refute) which agents are gone.
// It holds no NodeFence and its answers carry none; agents never count them (their member
// list is the Node objects).
//
// An agent gone is not a node dead: the agent may have been stopped, or only this seat
// cut off from it. The controller counts it only with evidence from elsewhere
// (detector.Detector.ObserveAgent). An agent that left with a goodbye (memberlist's
// leave, as a stopped agent says it: every DaemonSet rollout) is not gone for a grace
// period: its replacement is on its way.
type Observer struct {
	ml     *memberlist.Memberlist
	now    func() time.Time
	notify func(node string)
	grace  time.Duration

	mu      sync.Mutex
	dead    map[string]time.Time // node → when SWIM declared its agent dead, until it joins again
	leaving map[string]time.Time // node → when its agent said goodbye, until it joins again
	left    map[string]time.Time // node → its agent's latest goodbye, kept
	byes    map[string]bool      // nodes whose agent said goodbye since it last joined
	seen    map[string]bool      // nodes whose agent this seat has seen as a member
	stop    sync.Once
}

// StartObserver takes a seat named ObserverPrefix+identity; an agent that leaves with a
// goodbye is gone once grace has passed. notify is called with a node's name whenever its
// agent joins or goes, and when a goodbye's grace ends, outside any lock.
func StartObserver(cfg PeerConfig, identity string, grace time.Duration, notify func(node string), now func() time.Time) (*Observer, error) {
	cfg.Node = ObserverPrefix + identity
	mc, err := memberlistConfig(cfg)
	if err != nil {
		return nil, err
	}
	o := &Observer{now: now, notify: notify, grace: grace, dead: map[string]time.Time{}, leaving: map[string]time.Time{},
		left: map[string]time.Time{}, byes: map[string]bool{}, seen: map[string]bool{}}
	mc.Events = observerEvents{o}
	mc.Delegate = observerDelegate{o}
	mc.Ping = observerPing{}
	if o.ml, err = createMemberlist(mc, cfg); err != nil {
		return nil, err
	}
	return o, nil
}

// Join asks agents at addrs (node → host:port) that are not members yet to take this
// seat in: a random few each time (see Peers.Join).
func (o *Observer) Join(addrs map[string]string) { join(o.ml, memberNames(o.ml), addrs) }

// Gone returns since when node's agent is gone, and whether it is gone now: declared
// dead, or left with a goodbye more than the grace ago (and then gone since the grace
// ended). An agent this seat never saw as a member is not gone: its absence says nothing.
func (o *Observer) Gone(node string) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if at, ok := o.dead[node]; ok {
		return at, true
	}
	if at, ok := o.leaving[node]; ok && o.now().Sub(at) >= o.grace {
		return at.Add(o.grace), true
	}
	return time.Time{}, false
}

// Left is when this seat last saw node's agent leave with a goodbye; zero if never. A
// goodbye after the agent's latest report means its watchdog may have been disarmed.
func (o *Observer) Left(node string) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.left[node]
}

// Members is how many agents are members now, this seat's view.
func (o *Observer) Members() int {
	n := 0
	for _, m := range o.ml.Members() {
		if !strings.HasPrefix(m.Name, ObserverPrefix) {
			n++
		}
	}
	return n
}

// Addr is where this seat answers.
func (o *Observer) Addr() string { return o.ml.LocalNode().Address() }

// Stop leaves the peers.
func (o *Observer) Stop() { o.stop.Do(func() { leave(o.ml) }) }

func (o *Observer) changed(n *memberlist.Node, gone bool) {
	if strings.HasPrefix(n.Name, ObserverPrefix) {
		return
	}
	name := n.Name
	o.mu.Lock()
	switch {
	case !gone:
		o.seen[name] = true
		delete(o.dead, name)
		delete(o.leaving, name)
		delete(o.byes, name)
	case o.byes[name]:
		now := o.now()
		o.left[name] = now
		if o.seen[name] {
			o.startGrace(name, now)
		}
	case o.seen[name]:
		o.dead[name] = o.now()
	}
	o.mu.Unlock()
	o.notifyOf(name)
}

// startGrace counts node's agent as leaving with a goodbye since at, gone once the grace
// from at has passed. Called with o.mu held.
func (o *Observer) startGrace(node string, at time.Time) {
	o.leaving[node] = at
	// The grace's end changes the verdict with no event of its own.
	time.AfterFunc(max(0, o.grace-o.now().Sub(at)), func() { o.notifyOf(node) })
}

func (o *Observer) notifyOf(node string) {
	if o.notify != nil {
		o.notify(node)
	}
}

// byeWait bounds how long a stopping agent waits for its goodbyes to be taken.
const byeWait = 2 * time.Second

// sayBye tells the controller's seats among ml's members that this agent is stopping,
// each over a stream, waiting at most byeWait. memberlist reports a member that left and
// one declared dead alike (its node state is not passed on), so a seat knows a goodbye
// only from this message, authenticated with the peers' key like every other.
func sayBye(ml *memberlist.Memberlist) {
	b, err := json.Marshal(askMsg{Bye: true, From: ml.LocalNode().Name})
	if err != nil {
		return
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, m := range ml.Members() {
		if !strings.HasPrefix(m.Name, ObserverPrefix) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ml.SendReliable(m, b); err != nil {
				klog.V(2).InfoS("Saying goodbye to a controller's seat", "seat", m.Name, "err", err)
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(byeWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// observerDelegate takes the agents' goodbyes.
type observerDelegate struct{ o *Observer }

func (observerDelegate) NodeMeta(int) []byte             { return nil }
func (observerDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (observerDelegate) LocalState(bool) []byte          { return nil }
func (observerDelegate) MergeRemoteState([]byte, bool)   {}

func (d observerDelegate) NotifyMsg(b []byte) {
	var m askMsg
	if json.Unmarshal(b, &m) != nil || !m.Bye || m.From == "" {
		return
	}
	d.o.bye(m.From)
}

// bye takes node's agent's goodbye. The goodbye comes over a stream and the leave it
// precedes by gossip, so the seat may learn of the leave first: an agent already counted
// dead that then says goodbye left, from when it went. Either order ends the same, and a
// late goodbye only ever delays the verdict and marks the watchdog possibly disarmed.
func (o *Observer) bye(node string) {
	o.mu.Lock()
	o.byes[node] = true
	at, dead := o.dead[node]
	if dead {
		delete(o.dead, node)
		o.left[node] = at
		o.startGrace(node, at)
	}
	o.mu.Unlock()
	if dead {
		o.notifyOf(node)
	}
}

// observerEvents follows the member list: a member that leaves after its goodbye left,
// any other that leaves was declared dead.
type observerEvents struct{ o *Observer }

func (e observerEvents) NotifyJoin(n *memberlist.Node)   { e.o.changed(n, false) }
func (e observerEvents) NotifyLeave(n *memberlist.Node)  { e.o.changed(n, true) }
func (e observerEvents) NotifyUpdate(n *memberlist.Node) {}

// observerPing answers the agents' probes with an empty answer, which holds no node.
type observerPing struct{}

func (observerPing) AckPayload() []byte { return []byte("{}") }

func (observerPing) NotifyPingComplete(*memberlist.Node, time.Duration, []byte) {}

// joinsPerRound bounds how many agents one Join asks. One that answers sends its whole
// member list back (memberlist's push-pull), and gossip carries the joiner to the rest:
// asking every unknown agent at once made each of N agents starting together open N
// state exchanges, and at 100 nodes the rollout alone held the machine's two cores.
const joinsPerRound = 3

// memberNames are the names of ml's members.
func memberNames(ml *memberlist.Memberlist) map[string]bool {
	known := map[string]bool{}
	for _, m := range ml.Members() {
		known[m.Name] = true
	}
	return known
}

// join asks a few of the agents at addrs that are not among known to take ml in.
func join(ml *memberlist.Memberlist, known map[string]bool, addrs map[string]string) {
	var todo []string
	for name, addr := range addrs {
		if !known[name] && addr != "" {
			todo = append(todo, name+"/"+addr)
		}
	}
	if len(todo) == 0 {
		return
	}
	// A random few, so that an agent that is down does not hold back the others round
	// after round.
	rand.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
	todo = todo[:min(len(todo), joinsPerRound)]
	if n, err := ml.Join(todo); err != nil {
		klog.V(2).InfoS("Joining peers", "joined", n, "asked", len(todo), "err", err)
	}
}
