package selffence

import (
	"fmt"
	"slices"
	"time"
)

// AgentView is what a node agent knows when it decides whether its node may live on,
// every time on its own clock.
type AgentView struct {
	// Node is the agent's node.
	Node string
	// Members are the cluster's nodes as of the agent's last read of them from the API
	// server. The majority is more than half of them, the agent's node included.
	Members []string
	// APIRead is when the agent's last successful read of the open NodeFences began. Only
	// a quorum read counts (a LIST without resourceVersion, served by etcd): a cache may be
	// older than the NodeFence that matters. Zero if none yet.
	APIRead time.Time
	// Acks are, per peer, when the agent sent the latest ping that peer answered. An answer
	// is made after its ping was sent, so it carries what the peer knew at that moment or
	// later, whatever the network delayed. An answer of a peer that has not read the
	// NodeFences yet ("don't know") is no ack.
	Acks map[string]time.Time
	// Read are the nodes with a NodeFence past its budget in the agent's latest successful
	// read (the one begun at APIRead).
	Read []string
	// Relayed are the nodes named by the NodeFences that peers' answers carried, each kept
	// until a read of the agent's own, begun after the answer arrived, no longer lists
	// that NodeFence (by UID).
	Relayed []string
}

// Live returns "" while the agent may feed its node's watchdog at now, or why it must not:
// the cluster wants the node fenced (an open NodeFence for it, read or relayed), or the
// node has been cut off for longer than isolation, with neither a read from the API server
// nor answers from a majority of the members within it.
//
// A majority of answers keeps a node alive through an API server outage that every node
// sees. It cannot keep alive a node the cluster wants fenced: the controller counts a
// watchdog fence only after a majority of the members have reported holding the
// NodeFence (Verify), and any two majorities of one member list share a node, whose
// answers carry the NodeFence.
//
// A relayed NodeFence of the node's own counts only once the agent's own read is older
// than isolation. While that read is fresh it decides: a read begun after the NodeFence
// was created lists it (quorum reads), so one that does not either began before it (and
// then keeps the node alive no longer than isolation after it, which Verify waits for)
// or shows the incident ended. A peer that cannot read and still passes on a NodeFence
// that closed since never resets a node that reads.
func Live(v AgentView, isolation time.Duration, now time.Time) string {
	if slices.Contains(v.Read, v.Node) {
		return fmt.Sprintf("the cluster wants node %s fenced: an open NodeFence for it", v.Node)
	}
	if !v.APIRead.IsZero() && now.Sub(v.APIRead) <= isolation {
		return ""
	}
	if slices.Contains(v.Relayed, v.Node) {
		return fmt.Sprintf("the cluster wants node %s fenced: an open NodeFence for it, relayed by a peer while no read of its own is younger than %s", v.Node, isolation)
	}
	// Each member counts once, whatever the list repeats.
	members := distinct(v.Members)
	heard := 0
	if slices.Contains(members, v.Node) {
		heard = 1 // the agent's own node; an agent that never read the members has no majority
		for _, peer := range members {
			if at, ok := v.Acks[peer]; ok && peer != v.Node && now.Sub(at) <= isolation {
				heard++
			}
		}
	}
	if heard > 0 && 2*heard > len(members) {
		return ""
	}
	last := "never"
	if !v.APIRead.IsZero() {
		last = "since " + v.APIRead.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("node %s is cut off: no read from the API server %s, and answers from %d of %d members within %s",
		v.Node, last, heard, len(members), isolation)
}
