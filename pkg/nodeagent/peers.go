package nodeagent

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// PeerConfig says where an agent answers its peers.
type PeerConfig struct {
	// Node is the agent's node: its name among the peers.
	Node string
	// BindAddr:BindPort is where it listens (UDP for probes and acks, TCP for state
	// exchange); AdvertiseAddr:AdvertisePort is what the others dial, empty for the bind
	// address.
	BindAddr      string
	BindPort      int
	AdvertiseAddr string
	AdvertisePort int
	// Key authenticates and encrypts every packet (AES-GCM, 16, 24 or 32 bytes): an
	// answer that keeps a node alive must come from an agent.
	Key []byte
	// ProbeInterval is how often the agent probes one peer, in turn: every peer once per
	// members × ProbeInterval.
	ProbeInterval time.Duration
}

// SplitAddress splits host:port, the port a number from 0 to 65535 (0: any free port).
func SplitAddress(s string) (string, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("%q: the port must be a number from 0 to 65535", s)
	}
	return host, n, nil
}

// Peers are the agents' answers to each other, carried by hashicorp/memberlist (SWIM
// with Lifeguard): its probes are the pings, every ack carries the nodes the answering
// agent holds a NodeFence for, and a probe's round trip dates the answer: it was made
// after the probe was sent, now - rtt on the prober's own clock (selffence.AgentView.Acks).
// memberlist reports the round trip only for direct UDP probes, never for the indirect
// or TCP ones, which prove nothing about when.
type Peers struct {
	ml    *memberlist.Memberlist
	clock clock.PassiveClock
	// own is what the agent's latest read holds, and false before its first read; its
	// answers carry that and what the peers' answers relayed.
	own func() ([]Entry, bool)

	mu      sync.Mutex
	acks    map[string]time.Time
	relayed map[string]relayed   // by UID
	refuted map[string]time.Time // UIDs a read of this agent showed ended, and when
	asked   map[uint64]time.Time // rounds of Ask: nonce → when it was sent
	askedAt map[string]time.Time // per peer, when Ask last asked it
	// book is where each agent this one has known answers: memberlist's members as of
	// the read loop's last round, and the reports' addresses of those that were not
	// members. Ask asks by it an agent that memberlist counts dead: the controller's
	// seats declare dead an agent they cannot reach, their verdict reaches its peers, and
	// those peers may still hear it (scenario heartbeat-quiet: a node cut off from the
	// controller, then an API server outage; asked only among memberlist's members, its
	// peer and itself lost each other's answers, and both reset).
	book map[string]memberlist.Node
	// questions counts the questions Ask sent, answered the ones it answered.
	questions, answered atomic.Uint64
	stop                sync.Once
}

// StartPeers starts answering and probing; own says which NodeFences this agent's latest
// read holds, and whether it has read them yet.
func StartPeers(cfg PeerConfig, own func() ([]Entry, bool), clk clock.PassiveClock) (*Peers, error) {
	return startPeers(cfg, own, clk, func(*memberlist.Config) {})
}

// startPeers is StartPeers with adjust applied to memberlist's configuration last: the
// gossip simulation's in-memory network (gossipsim_test.go).
func startPeers(cfg PeerConfig, own func() ([]Entry, bool), clk clock.PassiveClock, adjust func(*memberlist.Config)) (*Peers, error) {
	mc, err := memberlistConfig(cfg)
	if err != nil {
		return nil, err
	}
	p := &Peers{clock: clk, own: own, acks: map[string]time.Time{}, relayed: map[string]relayed{}, refuted: map[string]time.Time{},
		asked: map[uint64]time.Time{}, askedAt: map[string]time.Time{}, book: map[string]memberlist.Node{}}
	mc.Ping = pingDelegate{p}
	mc.Delegate = askDelegate{p}
	adjust(mc)
	if p.ml, err = createMemberlist(mc, cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// memberlistConfig is the memberlist configuration every seat among the peers shares:
// agents and the controller alike.
func memberlistConfig(cfg PeerConfig) (*memberlist.Config, error) {
	switch len(cfg.Key) {
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("peer key: %d bytes, want 16, 24 or 32", len(cfg.Key))
	}
	if cfg.ProbeInterval <= 0 {
		return nil, fmt.Errorf("peer probe interval %s: must be positive", cfg.ProbeInterval)
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Node
	mc.Label = "kubefence-node-agent"
	mc.BindAddr, mc.BindPort = cfg.BindAddr, cfg.BindPort
	mc.AdvertiseAddr, mc.AdvertisePort = cfg.AdvertiseAddr, cfg.AdvertisePort
	if mc.AdvertiseAddr == "" {
		mc.AdvertisePort = 0
	}
	mc.SecretKey = cfg.Key
	mc.ProbeInterval = cfg.ProbeInterval
	// Only an ack within the probe timeout is reported with its round trip, and so
	// counts: at least 200ms, so that a loaded node's late answers still count.
	mc.ProbeTimeout = min(500*time.Millisecond, max(200*time.Millisecond, cfg.ProbeInterval/2))
	// An agent restarted on another address (a pod IP that changed) takes its node's
	// name back once the old one has been dead a moment.
	mc.DeadNodeReclaimTime = 5 * cfg.ProbeInterval
	// Lifeguard slows a member's probes up to eightfold while its own probes go
	// unanswered (members dead or leaving): an agent would then probe each peer less
	// often than isolation allows, and a node whose peers all live could stop feeding its
	// watchdog in an API server outage. Twofold at most keeps every peer probed within
	// isolation/2 where the probe interval is isolation/20 and there are fewer than ten
	// members; with more, probes alone cannot reach a majority within isolation, and an
	// agent whose read is late asks what a majority needs at once (Ask). A dead verdict,
	// which the slowing guards against, decides nothing alone.
	mc.AwarenessMaxMultiplier = 2
	// Every message is a few hundred bytes at most: LZW saves nothing on them, and its
	// tables, allocated anew for each packet, were most of an agent's CPU at 100 nodes.
	mc.EnableCompression = false
	mc.LogOutput = klogWriter{}
	return mc, nil
}

func createMemberlist(mc *memberlist.Config, cfg PeerConfig) (*memberlist.Memberlist, error) {
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("peers on %s: %w", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.BindPort)), err)
	}
	return ml, nil
}

// Addr is the address the other agents dial.
func (p *Peers) Addr() string {
	n := p.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// Join asks agents at addrs (host:port) that are not members yet to take this one in;
// it blocks up to memberlist's stream timeout for each it asks. Their addresses go into
// the book, where Ask finds them while they are no members.
func (p *Peers) Join(addrs map[string]string) { p.join(p.memberNames(), addrs) }

// join is Join with the members already known (memberNames).
func (p *Peers) join(known map[string]bool, addrs map[string]string) {
	p.mu.Lock()
	for name, addr := range addrs {
		if n := nodeAt(name, addr); n != nil && !known[name] {
			p.book[name] = *n
		}
	}
	p.mu.Unlock()
	join(p.ml, known, addrs)
}

// nodeAt is the agent name at addr (host:port, an IP address and a port other than 0),
// nil when addr is not one.
func nodeAt(name, addr string) *memberlist.Node {
	host, port, err := SplitAddress(addr)
	ip := net.ParseIP(host)
	if err != nil || ip == nil || port == 0 {
		return nil
	}
	return &memberlist.Node{Name: name, Addr: ip, Port: uint16(port)}
}

// memberNames are the names of the members this agent knows; their addresses go into
// the book.
func (p *Peers) memberNames() map[string]bool {
	members := p.ml.Members()
	known := make(map[string]bool, len(members))
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range members {
		known[m.Name] = true
		p.book[m.Name] = memberlist.Node{Name: m.Name, Addr: slices.Clone(m.Addr), Port: m.Port}
	}
	return known
}

// Acks are, per peer, when the latest probe it answered (and whose answer counted) was
// sent.
func (p *Peers) Acks() map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]time.Time, len(p.acks))
	for k, v := range p.acks {
		out[k] = v
	}
	return out
}

// askMsg is a question (Ask: a peer's answer now, outside the probes' turn) or its answer
// (Answer, with the nonce of the round it answers). Both travel as memberlist user
// messages, encrypted and authenticated with the peers' key like every packet.
type askMsg struct {
	Ask bool `json:"a,omitempty"`
	// Bye is an agent's goodbye to the controller's seats (sayBye).
	Bye  bool   `json:"b,omitempty"`
	From string `json:"n"`
	// Addr is where the asker takes answers: a peer that has not heard of it yet (gossip
	// carries a newcomer to everyone only in time) answers there.
	Addr   string  `json:"d,omitempty"`
	Nonce  uint64  `json:"r"`
	Answer *answer `json:"v,omitempty"`
}

// askedFor is how long a round of Ask takes answers.
const askedFor = 10 * time.Second

// askMargin is how many answers beyond a majority Ask seeks among n members, for the
// answers lost or late: a tenth of them, at least one.
func askMargin(n int) int { return max(1, (n+9)/10) }

// Ask asks, at once, as many members as the agent needs for a majority of fresh answers
// and a margin (askMargin), outside the probes' turn: probes reach one peer per probe
// interval, so with many members a majority of answers takes longer than isolation
// allows. members is the cluster's member list (the agent's node included, which counts
// for itself); an answer younger than fresh counts as held, and so does a member asked
// within pending that has not answered yet. A member memberlist counts dead is asked at
// its address in the book. Of the others, the members that answered
// most recently are asked first (they are the likeliest to live), then the ones never
// heard from, in random order. Each answer counts as made when the round was sent (as a
// probe's does). It returns how many it asked.
//
// Asking every member every round cost N² questions a round in an API server outage, and
// at 100 agents on two cores their answers came too late for some. Asking only
// what a majority needs, and again only once an answer is half-way to its limit, makes it
// about (N/2 + N/10) questions per agent per fresh period.
func (p *Peers) Ask(members []string, fresh, pending time.Duration) int {
	now := p.clock.Now()
	self := p.ml.LocalNode().Name
	byName := map[string]*memberlist.Node{}
	for _, m := range p.ml.Members() {
		byName[m.Name] = m
	}
	names := slices.Clone(members)
	slices.Sort(names)
	names = slices.Compact(names)
	want := min(len(names), len(names)/2+1+askMargin(len(names)))

	type candidate struct {
		node *memberlist.Node
		ack  time.Time
	}
	var due []candidate
	held := 0
	p.mu.Lock()
	for _, name := range names {
		ack, answered := p.acks[name]
		asked, wasAsked := p.askedAt[name]
		switch {
		case name == self,
			answered && now.Sub(ack) <= fresh,
			wasAsked && now.Sub(asked) <= pending:
			held++
		case byName[name] != nil:
			due = append(due, candidate{node: byName[name], ack: ack})
		default:
			if n, ok := p.book[name]; ok {
				due = append(due, candidate{node: &n, ack: ack})
			}
		}
	}
	if held >= want || len(due) == 0 {
		p.mu.Unlock()
		return 0
	}
	rand.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	slices.SortStableFunc(due, func(a, b candidate) int { return b.ack.Compare(a.ack) })
	due = due[:min(len(due), want-held)]
	nonce := rand.Uint64()
	for n, at := range p.asked {
		if now.Sub(at) > askedFor {
			delete(p.asked, n)
		}
	}
	p.asked[nonce] = now
	for name, at := range p.askedAt {
		if now.Sub(at) > askedFor {
			delete(p.askedAt, name)
		}
	}
	for _, c := range due {
		p.askedAt[c.node.Name] = now
	}
	p.mu.Unlock()
	msg, err := json.Marshal(askMsg{Ask: true, From: self, Addr: p.Addr(), Nonce: nonce})
	if err != nil {
		return 0
	}
	p.questions.Add(uint64(len(due)))
	for _, c := range due {
		if err := p.ml.SendBestEffort(c.node, msg); err != nil {
			klog.V(2).InfoS("Asking a peer", "peer", c.node.Name, "err", err)
		}
	}
	return len(due)
}

// answerAsk answers a peer's Ask.
func (p *Peers) answerAsk(q askMsg) {
	to := p.member(q.From)
	if to == nil {
		if to = nodeAt(q.From, q.Addr); to == nil {
			klog.V(2).InfoS("A question from a peer with no address to answer", "peer", q.From, "address", q.Addr)
			return
		}
	}
	p.answered.Add(1)
	a := p.answer()
	b, err := json.Marshal(askMsg{From: p.ml.LocalNode().Name, Nonce: q.Nonce, Answer: &a})
	if err == nil {
		err = p.ml.SendBestEffort(to, b)
	}
	if err != nil {
		klog.V(2).InfoS("Answering a peer", "peer", q.From, "err", err)
	}
}

// member is the member named name, if this agent knows it.
func (p *Peers) member(name string) *memberlist.Node {
	for _, m := range p.ml.Members() {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Stop leaves the peers and stops answering.
func (p *Peers) Stop() {
	p.stop.Do(func() {
		sayBye(p.ml)
		leave(p.ml)
	})
}

// Crash stops answering without a goodbye, as a killed agent does: for tests.
func (p *Peers) Crash() { p.stop.Do(func() { _ = p.ml.Shutdown() }) }

// leave says goodbye, so that the others count the seat gone at once, and stops.
func leave(ml *memberlist.Memberlist) {
	_ = ml.Leave(time.Second)
	_ = ml.Shutdown()
}

type pingDelegate struct{ p *Peers }

// AckPayload is this agent's answer.
func (d pingDelegate) AckPayload() []byte {
	b, _ := json.Marshal(d.p.answer())
	return b
}

// NotifyPingComplete records a direct probe's answer.
func (d pingDelegate) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	now := d.p.clock.Now()
	var a answer
	if err := json.Unmarshal(payload, &a); err != nil {
		klog.V(2).InfoS("A peer's answer does not count", "peer", other.Name, "err", err)
		return
	}
	d.p.heard(other.Name, a, now.Add(-rtt))
}

// askDelegate carries Ask's questions and answers.
type askDelegate struct{ p *Peers }

func (askDelegate) NodeMeta(int) []byte             { return nil }
func (askDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (askDelegate) LocalState(bool) []byte          { return nil }
func (askDelegate) MergeRemoteState([]byte, bool)   {}

// NotifyMsg takes a question, answered off memberlist's receive loop, or an answer to a
// round of Ask still open; anything else is dropped.
func (d askDelegate) NotifyMsg(b []byte) {
	var m askMsg
	if err := json.Unmarshal(b, &m); err != nil {
		return
	}
	if m.Ask {
		go d.p.answerAsk(m)
		return
	}
	d.p.mu.Lock()
	sent, ok := d.p.asked[m.Nonce]
	d.p.mu.Unlock()
	if ok && m.Answer != nil && d.p.clock.Since(sent) <= askedFor {
		d.p.heard(m.From, *m.Answer, sent)
	}
}

// klogWriter passes memberlist's log lines to klog at verbosity 4.
type klogWriter struct{}

func (klogWriter) Write(b []byte) (int, error) {
	klog.V(4).InfoS("memberlist", "line", string(b))

	return len(b), nil
}

var _ io.Writer = klogWriter{}
