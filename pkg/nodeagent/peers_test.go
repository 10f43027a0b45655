package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

type testPeer struct {
	p      *Peers
	mu     sync.Mutex
	own    []Entry
	unread bool // before its first read
}

func (tp *testPeer) hold(own ...Entry) {
	tp.mu.Lock()
	tp.own = own
	tp.mu.Unlock()
}

var x = Entry{Node: "x", UID: "uid-x"}

func startTestPeer(t *testing.T, node string, key []byte) *testPeer {
	t.Helper()
	return startTestPeerEvery(t, node, key, 100*time.Millisecond)
}

func startTestPeerEvery(t *testing.T, node string, key []byte, probe time.Duration) *testPeer {
	t.Helper()
	tp := &testPeer{}
	p, err := StartPeers(PeerConfig{Node: node, BindAddr: "127.0.0.1", BindPort: 0, Key: key, ProbeInterval: probe},
		func() ([]Entry, bool) { tp.mu.Lock(); defer tp.mu.Unlock(); return slices.Clone(tp.own), !tp.unread }, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	tp.p = p
	return tp
}

var peerKey = []byte("0123456789abcdef")

// Three agents answer each other: each hears the others with answers dated no later than
// when they arrived, and what one holds reaches the others, which pass it on.
func TestPeersAnswer(t *testing.T) {
	a, b, c := startTestPeer(t, "a", peerKey), startTestPeer(t, "b", peerKey), startTestPeer(t, "c", peerKey)
	b.p.Join(map[string]string{"a": a.p.Addr()})
	c.p.Join(map[string]string{"b": b.p.Addr()})
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		for _, p := range []*testPeer{a, b, c} {
			if len(p.p.Acks()) < 2 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("not every agent heard both others: a %v, b %v, c %v", a.p.Acks(), b.p.Acks(), c.p.Acks())
	}
	for name, at := range a.p.Acks() {
		if at.Before(start.Add(-time.Second)) || at.After(time.Now()) {
			t.Errorf("a's ack from %s dated %s, not within the test", name, at)
		}
	}
	a.hold(x)
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return slices.Equal(b.p.Fenced(), []Entry{x}) && slices.Equal(c.p.Fenced(), []Entry{x}), nil
	})
	if err != nil {
		t.Fatalf("a holds x; b carries %v, c %v", b.p.Fenced(), c.p.Fenced())
	}
	// A read that begins after the relay and does not show x drops it; one that began
	// before keeps it.
	b.p.Forget(nil, start)
	if !slices.Equal(b.p.Fenced(), []Entry{x}) {
		t.Errorf("a read older than the relay dropped it: %v", b.p.Fenced())
	}
	a.hold()
	c.p.Forget(nil, time.Now().Add(time.Minute)) // c's own read no longer shows x
	b.p.Forget(nil, time.Now().Add(time.Minute))
	// Relays still in flight may carry x back once; a read after them drops it for good.
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		later := time.Now().Add(time.Minute)
		b.p.Forget(nil, later)
		c.p.Forget(nil, later)
		return len(b.p.Fenced()) == 0 && len(c.p.Fenced()) == 0, nil
	})
	if err != nil {
		t.Errorf("x closed and read so by everyone, still carried: b %v, c %v", b.p.Fenced(), c.p.Fenced())
	}
}

// An agent without the key is never heard: an answer that keeps a node alive must come
// from an agent.
func TestPeersNeedTheKey(t *testing.T) {
	a, b := startTestPeer(t, "a", peerKey), startTestPeer(t, "b", []byte("fedcba9876543210"))
	b.p.Join(map[string]string{"a": a.p.Addr()})
	c := startTestPeer(t, "c", peerKey)
	c.p.Join(map[string]string{"a": a.p.Addr()})
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		_, ok := a.p.Acks()["c"]
		return ok, nil
	}); err != nil {
		t.Fatal("a never heard c, which has the key")
	}
	if _, ok := a.p.Acks()["b"]; ok {
		t.Error("a counted an answer of b, which has another key")
	}
	if len(b.p.Acks()) != 0 {
		t.Errorf("b, with another key, counted answers: %v", b.p.Acks())
	}
}

// TestAnswerOverflow: a dozen NodeFences fit an answer; twenty do not, and the answer
// says it overflowed.
func TestAnswerOverflow(t *testing.T) {
	holding := func(n int) *Peers {
		return &Peers{own: func() ([]Entry, bool) {
			var many []Entry
			for i := range n {
				many = append(many, Entry{Node: fmt.Sprintf("node-%d", i), UID: fmt.Sprintf("5e0c2c64-3e2a-4a4b-9a43-1c7a5f0d9e%02d", i)})
			}
			return many, true
		}, relayed: map[string]relayed{}}
	}
	if got := (pingDelegate{holding(12)}).AckPayload(); len(got) > maxAnswer || strings.Contains(string(got), `"o"`) {
		t.Errorf("payload of 12 NodeFences: %d bytes, %.80s; want them all", len(got), got)
	}
	if got := string((pingDelegate{holding(20)}).AckPayload()); got != `{"o":true}` {
		t.Errorf("payload of 20 NodeFences: %.80s, want the overflow answer", got)
	}
}

// An answer that overflowed, or does not parse, is not counted: it may have left out the
// prober's own NodeFence.
func TestOverflowAnswerNotCounted(t *testing.T) {
	p := &Peers{clock: clock.RealClock{}, acks: map[string]time.Time{}, relayed: map[string]relayed{}}
	d := pingDelegate{p}
	for _, payload := range []string{`{"o":true}`, `not json`, `{"f":["c"]}`} {
		d.NotifyPingComplete(&memberlist.Node{Name: "b"}, time.Millisecond, []byte(payload))
	}
	if len(p.Acks()) != 0 {
		t.Errorf("acks %v from answers that do not count", p.Acks())
	}
	d.NotifyPingComplete(&memberlist.Node{Name: "b"}, time.Millisecond, []byte(`{"f":[{"n":"c","u":"uid-c"}]}`))
	if _, ok := p.Acks()["b"]; !ok {
		t.Error("a whole answer was not counted")
	}
}

// A Join asks only a few of the agents it does not know (the rest learn of it by gossip),
// and rounds of Joins still reach every agent: eight agents on their own, each known only
// from the addresses given.
func TestJoinAsksAFew(t *testing.T) {
	addrs := map[string]string{}
	for i := range 8 {
		name := fmt.Sprintf("p%d", i)
		addrs[name] = startTestPeer(t, name, peerKey).p.Addr()
	}
	n := startTestPeer(t, "n", peerKey)
	n.p.Join(addrs)
	if got := n.p.ml.NumMembers(); got != 1+joinsPerRound {
		t.Fatalf("after one Join of 8 unknown agents: %d members, want itself and %d", got, joinsPerRound)
	}
	pollFor(t, "every agent a member after rounds of Joins", func() bool {
		n.p.Join(addrs)
		return n.p.ml.NumMembers() == 9
	})
}

// Ask hears a majority at once, where probes reach one peer per probe interval: twelve
// agents probing every 30s, and one Ask brings the asker the answers a majority and its
// margin need (nine of twelve, itself included), dated no earlier than the round and
// carrying what they hold.
func TestAskHearsAMajority(t *testing.T) {
	var peers []*testPeer
	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprintf("p%d", i))
		peers = append(peers, startTestPeerEvery(t, names[i], peerKey, 30*time.Second))
	}
	for _, p := range peers[1:] {
		p.p.Join(map[string]string{"p0": peers[0].p.Addr()})
	}
	pollFor(t, "twelve members", func() bool { return peers[0].p.ml.NumMembers() == 12 && peers[11].p.ml.NumMembers() == 12 })
	for _, p := range peers[:11] {
		p.hold(x)
	}
	a := peers[11]
	asked := time.Now()
	n := a.p.Ask(names, 10*time.Second, time.Second)
	pollFor(t, "answers from a majority and its margin", func() bool { return len(a.p.Acks())+1 >= 9 })
	if len(a.p.Acks()) > n {
		t.Logf("%d answers came from probes", len(a.p.Acks())-n)
	}
	if n < 1 || n > 8 {
		t.Errorf("one round asked %d of the 11 others; want at most the 8 a majority of 12 and a margin of 2 need", n)
	}
	for peer, at := range a.p.Acks() {
		if at.Before(asked.Add(-30*time.Second)) || at.After(time.Now()) {
			t.Errorf("answer of %s dated %s, not within the test", peer, at)
		}
	}
	if !slices.Contains(a.p.Fenced(), x) {
		t.Errorf("the answers did not relay x: %v", a.p.Fenced())
	}
}

// Ask asks only what a majority and its margin need: fresh answers and members asked a
// moment ago count, the members that answered most recently go first and those never
// heard from last, a name that is no member is not asked, and a second round right away
// asks nobody. Eleven names, ten of them agents: majority 6, margin 2.
func TestAskAsksWhatAMajorityNeeds(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	var names []string
	var others []*testPeer
	for i := 1; i < 10; i++ {
		names = append(names, fmt.Sprintf("p%d", i))
		others = append(others, startTestPeerEvery(t, names[len(names)-1], peerKey, time.Hour))
	}
	a, err := StartPeers(PeerConfig{Node: "p0", BindAddr: "127.0.0.1", Key: peerKey, ProbeInterval: time.Hour},
		func() ([]Entry, bool) { return nil, true }, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	for _, o := range others {
		o.p.Join(map[string]string{"p0": a.Addr()})
	}
	pollFor(t, "ten members", func() bool { return a.ml.NumMembers() == 10 })
	names = append(names, "p0", "gone")
	now := clk.Now()
	a.mu.Lock()
	a.acks = map[string]time.Time{"p1": now.Add(-time.Second), "p2": now.Add(-time.Second),
		"p4": now.Add(-20 * time.Second), "p5": now.Add(-8 * time.Second)}
	a.askedAt["p3"] = now.Add(-100 * time.Millisecond)
	a.mu.Unlock()

	// Held: p0 itself, p1 and p2 (fresh), p3 (asked, not answered yet): 4 of the 8 wanted.
	if n := a.Ask(names, 5*time.Second, time.Second); n != 4 {
		t.Fatalf("asked %d, want 4 (8 wanted, 4 held)", n)
	}
	a.mu.Lock()
	asked := maps.Clone(a.askedAt)
	a.mu.Unlock()
	for _, name := range []string{"p5", "p4"} {
		if !asked[name].Equal(now) {
			t.Errorf("%s (answered 8s and 20s ago) not asked first: asked %v", name, asked)
		}
	}
	if _, ok := asked["gone"]; ok {
		t.Errorf("a name with no member asked: %v", asked)
	}
	if n := a.Ask(names, 5*time.Second, time.Second); n != 0 {
		t.Errorf("a second round right away asked %d, want 0: the first one's are pending", n)
	}
	pollFor(t, "the four answers", func() bool {
		got := 0
		for name, at := range a.Acks() {
			if asked[name].Equal(now) && at.Equal(now) {
				got++
			}
		}
		return got == 4
	})
	answeredByOthers := uint64(0)
	for _, o := range others {
		answeredByOthers += o.p.answered.Load()
	}
	if q := a.questions.Load(); q != 4 || answeredByOthers != 4 {
		t.Errorf("questions sent %d, answered by the others %d; want 4 and 4", q, answeredByOthers)
	}
}

// An answer counts only for a round of Ask this agent sent, and not once the round is
// over: anything else could be a replay of an old answer.
func TestAnswerNeedsItsRound(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	p := &Peers{clock: clk, acks: map[string]time.Time{}, relayed: map[string]relayed{}, asked: map[uint64]time.Time{7: clk.Now()}, askedAt: map[string]time.Time{}}
	d := askDelegate{p}
	answerFor := func(nonce uint64) []byte {
		b, _ := json.Marshal(askMsg{From: "b", Nonce: nonce, Answer: &answer{Fenced: []Entry{{Node: "c", UID: "uid-c"}}}})
		return b
	}
	d.NotifyMsg(answerFor(8))
	if len(p.Acks()) != 0 || len(p.relayed) != 0 {
		t.Fatalf("an answer to a round never sent counted: acks %v, relayed %v", p.Acks(), p.relayed)
	}
	clk.Step(askedFor + time.Second)
	d.NotifyMsg(answerFor(7))
	if len(p.Acks()) != 0 {
		t.Fatalf("an answer after its round was over counted: %v", p.Acks())
	}
	p.asked[9] = clk.Now()
	d.NotifyMsg(answerFor(9))
	if at, ok := p.Acks()["b"]; !ok || !at.Equal(p.asked[9]) {
		t.Errorf("an answer to an open round: acks %v, want b dated when the round was sent", p.Acks())
	}
}

// Ask reaches an agent that memberlist does not count among its members (the
// controller's seats declared it dead) at its address in the book, and its answer counts:
// two agents that never joined, one knowing the other only from the book.
func TestAskReachesAnAgentByTheBook(t *testing.T) {
	a, b := startTestPeerEvery(t, "a", peerKey, time.Hour), startTestPeerEvery(t, "b", peerKey, time.Hour)
	if n := a.p.Ask([]string{"a", "b"}, time.Second, time.Second); n != 0 {
		t.Fatalf("asked %d with b neither a member nor in the book", n)
	}
	inBook := nodeAt("b", b.p.Addr())
	if inBook == nil {
		t.Fatalf("b's address %q is no host:port", b.p.Addr())
	}
	a.p.mu.Lock()
	a.p.book["b"] = *inBook
	a.p.askedAt = map[string]time.Time{}
	a.p.mu.Unlock()
	if a.p.ml.NumMembers() != 1 {
		t.Fatalf("a has %d members, want itself alone", a.p.ml.NumMembers())
	}
	asked := time.Now()
	if n := a.p.Ask([]string{"a", "b"}, time.Second, time.Second); n != 1 {
		t.Fatalf("asked %d, want b, by the book", n)
	}
	pollFor(t, "b's answer", func() bool { at, ok := a.p.Acks()["b"]; return ok && !at.Before(asked) })
}
