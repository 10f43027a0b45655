package nodeagent

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"

	"k8s.io/klog/v2"
)

// maxAnswer bounds an answer's payload: it rides in a memberlist ack, one UDP packet
// (memberlist's UDPBufferSize is 1400 bytes), about a dozen NodeFences. An agent that
// holds more than fits answers "overflow", and such an answer is not counted: an answer
// that left a NodeFence out could keep alive a node the cluster wants fenced.
const maxAnswer = 1000

// refutedFor is how long an agent remembers the UIDs of NodeFences that its own reads
// showed ended: a peer that cannot read passes such an entry on for as long as it cannot,
// and an ended NodeFence never opens again.
const refutedFor = time.Hour

// Entry is a NodeFence past its budget as the agents pass it on: its node, and its UID,
// so that no entry of an incident that ended is ever taken for a later one of the same
// node.
type Entry struct {
	Node string `json:"n"`
	UID  string `json:"u"`
}

// answer is the payload of an agent's acks and of its answers to Ask: the NodeFences it
// holds. Unknown is the answer of an agent that has not read the NodeFences yet (one
// just started): it knows nothing, and its answer is no ack.
type answer struct {
	Fenced   []Entry `json:"f,omitempty"`
	Overflow bool    `json:"o,omitempty"`
	Unknown  bool    `json:"x,omitempty"`
}

// relayed is a NodeFence a peer's answer carried.
type relayed struct {
	node     string
	received time.Time
}

// answer is this agent's answer now: "don't know" before its first read, the overflow
// answer when it would not fit a packet.
func (p *Peers) answer() answer {
	own, known := p.own()
	if !known {
		return answer{Unknown: true}
	}
	a := answer{Fenced: p.carried(own)}
	if b, err := json.Marshal(a); err != nil || len(b) > maxAnswer {
		return answer{Overflow: true}
	}
	return a
}

// carried are own and the relayed NodeFences, sorted and each once. An agent passes its
// own on as long as its latest read holds them, however old that read: the controller
// counts a node reset once a majority held its NodeFence, and every answer of a holder
// given after that must carry it (selffence.Live; dropping an agent's own list once older
// than isolation lets a node live on, TestSelfFenceModelScripted).
func (p *Peers) carried(own []Entry) []Entry {
	all := slices.Clone(own)
	p.mu.Lock()
	for uid, r := range p.relayed {
		all = append(all, Entry{Node: r.node, UID: uid})
	}
	p.mu.Unlock()
	slices.SortFunc(all, func(a, b Entry) int { return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.UID, b.UID)) })
	return slices.Compact(all)
}

// Fenced are the NodeFences this agent's answers carry now.
func (p *Peers) Fenced() []Entry {
	own, _ := p.own()
	return p.carried(own)
}

// Relayed are the nodes of the NodeFences the peers' answers carried that no read of this
// agent has dropped, sorted: selffence.AgentView.Relayed.
func (p *Peers) Relayed() []string {
	p.mu.Lock()
	nodes := make([]string, 0, len(p.relayed))
	for _, r := range p.relayed {
		nodes = append(nodes, r.node)
	}
	p.mu.Unlock()
	slices.Sort(nodes)
	return slices.Compact(nodes)
}

// Forget drops the relayed NodeFences that a read begun at began did not list, among
// those received before it began: the read is newer than the answer, so each of them has
// ended, and is remembered as such (refutedFor) so that a peer that cannot read does not
// bring it back.
func (p *Peers) Forget(read []Entry, began time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for uid, r := range p.relayed {
		if r.received.Before(began) && !slices.ContainsFunc(read, func(e Entry) bool { return e.UID == uid }) {
			delete(p.relayed, uid)
			p.refuted[uid] = began
		}
	}
	for uid, at := range p.refuted {
		if began.Sub(at) > refutedFor {
			delete(p.refuted, uid)
		}
	}
}

// heard records an answer from peer to a question sent at sent. An answer that overflowed
// does not count (it may have left out the asker's own NodeFence), nor does one of an
// agent that has not read yet (it knows nothing).
func (p *Peers) heard(peer string, a answer, sent time.Time) {
	if a.Overflow || a.Unknown {
		klog.V(2).InfoS("A peer's answer does not count", "peer", peer, "overflow", a.Overflow, "notReadYet", a.Unknown)
		return
	}
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if sent.After(p.acks[peer]) {
		p.acks[peer] = sent
	}
	for _, e := range a.Fenced {
		if _, ok := p.relayed[e.UID]; ok || e.UID == "" || e.Node == "" {
			continue
		}
		if _, ok := p.refuted[e.UID]; !ok {
			p.relayed[e.UID] = relayed{node: e.Node, received: now}
		}
	}
}
