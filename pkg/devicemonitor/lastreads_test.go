package devicemonitor

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// TestLastReadsKeepTheLastRoundAndLaterReads: a round's reads are kept, sorted by node,
// with when the round ended; a device read again between rounds replaces its node's
// read alone; the next round replaces every read, and a node it no longer reads has
// none.
func TestLastReadsKeepTheLastRoundAndLaterReads(t *testing.T) {
	w := newWorld(t)
	if reads, round := w.m.LastReads(); len(reads) != 0 || !round.IsZero() {
		t.Fatalf("before any round: %v at %v", reads, round)
	}
	w.reads.state["node-1"] = plugin.StateOn
	w.round(t)
	reads, round := w.m.LastReads()
	if len(reads) != 2 || reads[0].Node != "node-1" || reads[1].Node != "node-2" || !round.Equal(t0) {
		t.Fatalf("after a round: %+v at %v", reads, round)
	}

	later := t0.Add(time.Minute)
	w.reads.at, w.reads.errs = later, map[string]error{"node-2": errors.New("dial 10.0.0.2:623: i/o timeout")}
	node2, err := w.m.Nodes.Get("node-2")
	if err != nil {
		t.Fatal(err)
	}
	w.m.apply(context.Background(), w.reads.CheckAll(context.Background(), nil, []*corev1.Node{node2}))
	reads, round = w.m.LastReads()
	if !reads[0].At.Equal(t0) || reads[0].Err != nil || !reads[1].At.Equal(later) || reads[1].Err == nil || !round.Equal(t0) {
		t.Fatalf("after node-2's device was read again: %+v at %v", reads, round)
	}

	if err := w.idx.Delete(node2); err != nil {
		t.Fatal(err)
	}
	nodes, err := w.m.Nodes.List(everything())
	if err != nil {
		t.Fatal(err)
	}
	w.m.record(context.Background(), w.reads.CheckAll(context.Background(), nil, nodes), later)
	if reads, round = w.m.LastReads(); len(reads) != 1 || reads[0].Node != "node-1" || !round.Equal(later) {
		t.Fatalf("after a round without node-2: %+v at %v", reads, round)
	}
}
