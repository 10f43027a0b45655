package nodeagent

import (
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
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
// (detector.Detector.ObserveAgent).
type Observer struct {
	ml     *memberlist.Memberlist
	now    func() time.Time
	notify func(node string)

	mu   sync.Mutex
	gone map[string]time.Time // node → when this seat learned its agent left or was declared dead
	seen map[string]bool      // nodes whose agent this seat has seen as a member
	stop sync.Once
}

// StartObserver takes a seat named ObserverPrefix+identity; notify is called with a
// node's name whenever its agent joins or goes, outside any lock.
func StartObserver(cfg PeerConfig, identity string, notify func(node string), now func() time.Time) (*Observer, error) {
	cfg.Node = ObserverPrefix + identity
	mc, err := memberlistConfig(cfg)
	if err != nil {
		return nil, err
	}
	o := &Observer{now: now, notify: notify, gone: map[string]time.Time{}, seen: map[string]bool{}}
	mc.Events = observerEvents{o}
	mc.Ping = observerPing{}
	if o.ml, err = createMemberlist(mc, cfg); err != nil {
		return nil, err
	}
	return o, nil
}

// Join asks agents at addrs (node → host:port) that are not members yet to take this
// seat in: a random few each time (see Peers.Join).
func (o *Observer) Join(addrs map[string]string) { join(o.ml, memberNames(o.ml), addrs) }

// Gone returns when this seat learned that node's agent had left or been declared dead,
// and whether it is gone now. An agent this seat never saw as a member is not gone: its
// absence says nothing.
func (o *Observer) Gone(node string) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.gone[node]
	return at, ok
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
	o.mu.Lock()
	if gone {
		if o.seen[n.Name] {
			o.gone[n.Name] = o.now()
		}
	} else {
		o.seen[n.Name] = true
		delete(o.gone, n.Name)
	}
	o.mu.Unlock()
	if o.notify != nil {
		o.notify(n.Name)
	}
}

// observerEvents follows the member list. memberlist reports a member that left and one
// declared dead alike (NotifyLeave); both count as gone.
type observerEvents struct{ o *Observer }

func (e observerEvents) NotifyJoin(n *memberlist.Node)   { e.o.changed(n, false) }
func (e observerEvents) NotifyLeave(n *memberlist.Node)  { e.o.changed(n, true) }
func (e observerEvents) NotifyUpdate(n *memberlist.Node) {}

// observerPing answers the agents' probes with an empty answer, which holds no node.
type observerPing struct{}

func (observerPing) AckPayload() []byte { return []byte("{}") }

func (observerPing) NotifyPingComplete(*memberlist.Node, time.Duration, []byte) {}
