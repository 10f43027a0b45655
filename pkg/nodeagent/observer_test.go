package nodeagent

import (
	"context"
	"testing"
	"time"

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
		"replica-1", func(node string) {
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
