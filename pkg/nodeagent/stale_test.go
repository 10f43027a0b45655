package nodeagent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// TestStoppedAgentReportsDisarmedFirst: an agent stopped while its node may live (a
// rollout's SIGTERM) writes a last report saying its watchdog is disarmed, and only then
// disarms it; nothing it writes afterwards says "armed". Were the node cut off next, the
// controller's latest report would otherwise say "armed" while nothing counts down.
func TestStoppedAgentReportsDisarmedFirst(t *testing.T) {
	f := newFixture(t, true)
	f.reportWhere(t, "the watchdog is armed", func(r Report) bool { return r.Watchdog.Armed && r.Watchdog.Stopped == "" })
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	r := f.reportWhere(t, "the last report", func(Report) bool { return true })
	if r.Watchdog.Armed || r.Watchdog.Kind != "emulated" || r.Watchdog.Stopped != "disarmed: the agent stopped while its node may live" {
		t.Errorf("last report's watchdog %+v; want not armed, emulated, and why", r.Watchdog)
	}
	if armed, _ := f.emu.Armed(); armed {
		t.Error("the emulator is still armed after the agent reported it disarmed")
	}
}

// TestStoppedAgentThatCannotReportLeavesTheCountdown: an agent stopped while its report
// cannot be written (the node cut off from the API server) does not disarm: the last
// report the controller read says "armed", and so the watchdog resets the node.
func TestStoppedAgentThatCannotReportLeavesTheCountdown(t *testing.T) {
	f := newFixture(t, true)
	f.reportWhere(t, "the watchdog is armed", func(r Report) bool { return r.Watchdog.Armed && r.Watchdog.Stopped == "" })
	f.writeErr.Store(true)
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	if armed, _ := f.emu.Armed(); !armed {
		t.Fatal("the agent disarmed its watchdog without reporting it")
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.expired.Load() > 0, nil
	}); err != nil {
		t.Fatal("the countdown of an agent that stopped without its last report did not run out")
	}
	if feeder, _ := f.agent.started(); !strings.Contains(feeder.State().Stopped, "could not report that it disarms") {
		t.Errorf("feeder state %+v; want why it did not disarm", feeder.State())
	}
}

// TestStaleRelayResetsNoNodeThatReads: a peer that cannot read still passes on node a's
// NodeFence, which has since closed. Node a reads the NodeFences itself (none is open):
// its own fresh read decides, the relayed entry is dropped by UID at its next read and not
// taken back, and its watchdog is fed through three timeouts.
func TestStaleRelayResetsNoNodeThatReads(t *testing.T) {
	f := newFixtureOf(t, true, func(c *Config) {
		c.Timing.Isolation, c.Timing.ReadEvery = 3*time.Second, time.Second
		c.Peers = &PeerConfig{Node: "a", BindAddr: "127.0.0.1", Key: peerKey, ProbeInterval: 50 * time.Millisecond}
	})
	f.reportWhere(t, "the watchdog is armed", func(r Report) bool { return r.Watchdog.Armed && r.Watchdog.Stopped == "" })
	stale := Entry{Node: "a", UID: "0b8e3a52-closed-long-ago"}
	b := startTestPeerEvery(t, "b", peerKey, 50*time.Millisecond)
	b.hold(stale)
	_, peers := f.agent.started()
	b.p.Join(map[string]string{"a": peers.Addr()})
	pollFor(t, "a hearing b's answer and dropping the closed NodeFence", func() bool {
		peers.mu.Lock()
		defer peers.mu.Unlock()
		_, refuted := peers.refuted[stale.UID]
		return refuted
	})
	fed := time.Now()
	feeder, _ := f.agent.started()
	pollFor(t, "three timeouts of feeding", func() bool { return feeder.State().LastFed.After(fed.Add(3 * time.Second)) })
	if st := feeder.State(); st.Stopped != "" || f.expired.Load() > 0 {
		t.Errorf("node a, which reads and has no open NodeFence, stopped feeding: %+v (expired %d)", st, f.expired.Load())
	}
	if r := peers.Relayed(); len(r) != 0 {
		t.Errorf("relayed %v after a read that does not list the NodeFence", r)
	}
}

// TestDontKnowIsNoAck: an agent that has not read the NodeFences yet (one just started)
// answers "don't know", and its answer is no ack: a restarted holder must not help a
// node its NodeFence names to a majority. Once it has read, its answers count.
func TestDontKnowIsNoAck(t *testing.T) {
	a, b := startTestPeer(t, "a", peerKey), startTestPeer(t, "b", peerKey)
	b.mu.Lock()
	b.unread = true
	b.mu.Unlock()
	a.p.Join(map[string]string{"b": b.p.Addr()})
	pollFor(t, "b hearing a", func() bool { _, ok := b.p.Acks()["a"]; return ok })
	// A later round trip of b's probes: a's own probes of b, every 100ms, have had their
	// time.
	probed := time.Now().Add(200 * time.Millisecond)
	pollFor(t, "b's probes answered later", func() bool { at := b.p.Acks()["a"]; return at.After(probed) })
	if at, ok := a.p.Acks()["b"]; ok {
		t.Fatalf("a counted b's answer to a probe sent at %s, before b read anything", at)
	}
	a.p.Ask([]string{"a", "b"}, time.Second, 0)
	pollFor(t, "b answering a's question", func() bool { return b.p.answered.Load() > 0 })
	answered := time.Now().Add(200 * time.Millisecond)
	pollFor(t, "b's probes answered later again", func() bool { at := b.p.Acks()["a"]; return at.After(answered) })
	if at, ok := a.p.Acks()["b"]; ok {
		t.Fatalf("a counted b's answer to its question of %s, before b read anything", at)
	}
	b.mu.Lock()
	b.unread = false
	b.mu.Unlock()
	pollFor(t, "a counting b once it read", func() bool { _, ok := a.p.Acks()["b"]; return ok })
}

// TestRelaysNameNodeFences: a relayed NodeFence is dropped by its UID once a read begun
// after it arrived does not list it, even while another NodeFence of the same node is
// open, and is not taken back from a peer that still passes it on.
func TestRelaysNameNodeFences(t *testing.T) {
	now := time.Now()
	p := &Peers{clock: clock.RealClock{}, acks: map[string]time.Time{}, relayed: map[string]relayed{}, refuted: map[string]time.Time{},
		own: func() ([]Entry, bool) { return nil, true }}
	old, fresh := Entry{Node: "c", UID: "uid-old"}, Entry{Node: "c", UID: "uid-new"}
	p.heard("b", answer{Fenced: []Entry{old}}, now)
	if got := p.Relayed(); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("relayed %v, want c", got)
	}
	p.Forget([]Entry{fresh}, time.Now().Add(time.Millisecond))
	if got := p.Fenced(); len(got) != 0 {
		t.Errorf("carried %v after a read listing only c's newer NodeFence; want the old one dropped", got)
	}
	p.heard("b", answer{Fenced: []Entry{old, fresh}}, now)
	if got := p.Fenced(); !slices.Equal(got, []Entry{fresh}) {
		t.Errorf("carried %v after b passed both on again; want only the newer one", got)
	}
}
