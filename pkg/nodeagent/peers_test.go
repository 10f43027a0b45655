package nodeagent

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

type testPeer struct {
	p   *Peers
	mu  sync.Mutex
	own []string
}

func startTestPeer(t *testing.T, node string, key []byte) *testPeer {
	t.Helper()
	tp := &testPeer{}
	p, err := StartPeers(PeerConfig{Node: node, BindAddr: "127.0.0.1", BindPort: 0, Key: key, ProbeInterval: 100 * time.Millisecond},
		func() []string { tp.mu.Lock(); defer tp.mu.Unlock(); return slices.Clone(tp.own) }, clock.RealClock{})
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
	a.mu.Lock()
	a.own = []string{"x"}
	a.mu.Unlock()
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return slices.Equal(b.p.Fenced(), []string{"x"}) && slices.Equal(c.p.Fenced(), []string{"x"}), nil
	})
	if err != nil {
		t.Fatalf("a holds x; b carries %v, c %v", b.p.Fenced(), c.p.Fenced())
	}
	// A read that begins after the relay and does not show x drops it; one that began
	// before keeps it.
	b.p.Forget(nil, start)
	if !slices.Equal(b.p.Fenced(), []string{"x"}) {
		t.Errorf("a read older than the relay dropped it: %v", b.p.Fenced())
	}
	a.mu.Lock()
	a.own = nil
	a.mu.Unlock()
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

func TestAnswerOverflow(t *testing.T) {
	p := &Peers{own: func() []string {
		var many []string
		for i := range 200 {
			many = append(many, "node-with-a-long-name-"+string(rune('a'+i%26))+string(rune('a'+i/26)))
		}
		return many
	}, relayed: map[string]relayed{}}
	if got := string(pingDelegate{p}.AckPayload()); got != `{"o":true}` {
		t.Errorf("payload of 200 nodes: %.80s, want the overflow answer", got)
	}
}

// An answer that overflowed, or does not parse, is not counted: it may have left out the
// prober's own NodeFence.
func TestOverflowAnswerNotCounted(t *testing.T) {
	p := &Peers{clock: clock.RealClock{}, acks: map[string]time.Time{}, relayed: map[string]relayed{}}
	d := pingDelegate{p}
	for _, payload := range []string{`{"o":true}`, `not json`} {
		d.NotifyPingComplete(&memberlist.Node{Name: "b"}, time.Millisecond, []byte(payload))
	}
	if len(p.Acks()) != 0 {
		t.Errorf("acks %v from answers that do not count", p.Acks())
	}
	d.NotifyPingComplete(&memberlist.Node{Name: "b"}, time.Millisecond, []byte(`{"f":["c"]}`))
	if _, ok := p.Acks()["b"]; !ok {
		t.Error("a whole answer was not counted")
	}
}
