package nodeagent

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"k8s.io/apimachinery/pkg/util/wait"
)

func pollFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("%s: not within 30s", what)
	}
}

// A controller's seat learns which agents are gone: one that crashed (no leave) once SWIM
// declares it dead, one stopped cleanly at once; an agent back in is no longer gone, and
// one never seen is never gone. The agents take the seat's empty answers without counting
// it among their nodes.
func TestObserverGone(t *testing.T) {
	changed := make(chan string, 100)
	o, err := StartObserver(PeerConfig{BindAddr: "127.0.0.1", Key: peerKey, ProbeInterval: 100 * time.Millisecond},
		"replica-1", 0, func(node string) {
			select {
			case changed <- node:
			default:
			}
		}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	a, b, c := startTestPeer(t, "a", peerKey), startTestPeer(t, "b", peerKey), startTestPeer(t, "c", peerKey)
	o.Join(map[string]string{"a": a.p.Addr(), "b": b.p.Addr(), "c": c.p.Addr()})
	pollFor(t, "the seat sees three agents", func() bool { return o.Members() == 3 })
	pollFor(t, "agent a hears the seat", func() bool { _, ok := a.p.Acks()[ObserverPrefix+"replica-1"]; return ok })
	if _, gone := o.Gone("never-seen"); gone {
		t.Error("an agent never seen is gone")
	}

	start := time.Now()
	c.p.Crash()
	pollFor(t, "crashed agent c gone", func() bool { _, gone := o.Gone("c"); return gone })
	if at, _ := o.Gone("c"); at.Before(start) {
		t.Errorf("c gone at %s, before it crashed at %s", at, start)
	}
	for _, n := range []string{"a", "b"} {
		if _, gone := o.Gone(n); gone {
			t.Errorf("agent %s, still running, is gone", n)
		}
	}
	seenC := false
	for len(changed) > 0 {
		if <-changed == "c" {
			seenC = true
		}
	}
	if !seenC {
		t.Error("no notification for c")
	}

	b.p.Stop() // a clean stop leaves
	pollFor(t, "stopped agent b gone", func() bool { _, gone := o.Gone("b"); return gone })

	// Restarted on another port, c takes its name back once the old c has been dead
	// for DeadNodeReclaimTime. A member that hears of the new c before then conflicts and
	// drops it, and gossip may not tell it again: what brings c back is the seat joining
	// the address c's report gives, as the controller does every 2s.
	c2 := startTestPeer(t, "c", peerKey)
	pollFor(t, "restarted agent c back", func() bool {
		o.Join(map[string]string{"c": c2.p.Addr()})
		_, gone := o.Gone("c")
		return !gone
	})
	for _, n := range []string{"a", "c"} {
		if _, gone := o.Gone(n); gone {
			t.Errorf("agent %s, running, is gone", n)
		}
	}
}

// TestObserverGoodbyeGrace: an agent that leaves with a goodbye (a stop, a rollout) is
// not gone until the grace has passed, on the seat's clock, and then gone from the end
// of the grace; its goodbye is kept (Left) after it joins again. One that crashes is
// gone at once.
func TestObserverGoodbyeGrace(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	clk := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	o, err := StartObserver(PeerConfig{BindAddr: "127.0.0.1", Key: peerKey, ProbeInterval: 100 * time.Millisecond}, "replica-1", time.Minute, nil, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	a, b := startTestPeer(t, "a", peerKey), startTestPeer(t, "b", peerKey)
	o.Join(map[string]string{"a": a.p.Addr(), "b": b.p.Addr()})
	pollFor(t, "the seat sees both agents", func() bool { return o.Members() == 2 })
	// The seat counts a member once its join's state exchange answers; the agent takes
	// the seat in only after answering, and an agent that does not know the seat says it
	// no goodbye (a loaded CI machine stopped a in between).
	pollFor(t, "agent a hears the seat", func() bool { _, ok := a.p.Acks()[ObserverPrefix+"replica-1"]; return ok })
	a.p.Stop()
	pollFor(t, "a's goodbye", func() bool { return !o.Left("a").IsZero() })
	if _, gone := o.Gone("a"); gone {
		t.Error("a, which said goodbye, is gone before the grace passed")
	}
	mu.Lock()
	left := now
	now = now.Add(time.Minute)
	mu.Unlock()
	if at, gone := o.Gone("a"); !gone || !at.Equal(left.Add(time.Minute)) {
		t.Errorf("a after the grace: gone %t since %s; want gone since the grace ended", gone, at)
	}
	b.p.Crash()
	pollFor(t, "crashed b gone at once", func() bool { _, gone := o.Gone("b"); return gone })
	if !o.Left("b").IsZero() {
		t.Error("b, which crashed, said goodbye")
	}
	a2 := startTestPeer(t, "a", peerKey)
	pollFor(t, "a back", func() bool {
		o.Join(map[string]string{"a": a2.p.Addr()})
		_, gone := o.Gone("a")
		return !gone
	})
	if !o.Left("a").Equal(left) {
		t.Errorf("a's goodbye %s forgotten once it joined again", o.Left("a"))
	}
}

// TestObserverGoodbyeAfterLeave: the goodbye travels over a stream and the leave by
// gossip, so the seat may count the agent dead before its goodbye arrives (memberlist
// orders neither against the other). The late goodbye still makes it an agent that left, from when it went:
// not gone within the grace, and its watchdog possibly disarmed (Left).
func TestObserverGoodbyeAfterLeave(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	clk := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	notified := make(chan string, 10)
	o, err := StartObserver(PeerConfig{BindAddr: "127.0.0.1", Key: peerKey, ProbeInterval: 100 * time.Millisecond}, "replica-1", time.Minute,
		func(node string) { notified <- node }, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	events, msgs := observerEvents{o}, observerDelegate{o}
	events.NotifyJoin(&memberlist.Node{Name: "a"})
	wentAt := now
	events.NotifyLeave(&memberlist.Node{Name: "a"})
	if _, gone := o.Gone("a"); !gone {
		t.Fatal("a, which left with no goodbye yet, is not gone")
	}
	for len(notified) > 0 {
		<-notified
	}
	mu.Lock()
	now = now.Add(300 * time.Millisecond)
	mu.Unlock()
	bye, err := json.Marshal(askMsg{Bye: true, From: "a"})
	if err != nil {
		t.Fatal(err)
	}
	msgs.NotifyMsg(bye)
	if _, gone := o.Gone("a"); gone {
		t.Error("a, whose goodbye came after its leave, is gone before the grace passed")
	}
	if !o.Left("a").Equal(wentAt) {
		t.Errorf("a's goodbye recorded at %s; want when it went, %s", o.Left("a"), wentAt)
	}
	select {
	case n := <-notified:
		if n != "a" {
			t.Errorf("notified of %q; want a", n)
		}
	default:
		t.Error("no notification for a's late goodbye")
	}
	mu.Lock()
	now = wentAt.Add(time.Minute)
	mu.Unlock()
	if at, gone := o.Gone("a"); !gone || !at.Equal(wentAt.Add(time.Minute)) {
		t.Errorf("a after the grace: gone %t since %s; want gone since %s", gone, at, wentAt.Add(time.Minute))
	}
}
