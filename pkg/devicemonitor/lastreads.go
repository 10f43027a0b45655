package devicemonitor

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kubefence/kubefence/pkg/fencecall"
)

// lastReads are the last read of every node's first-level devices, for a person to see
// (`fence-controller devices`, `kubectl fence status`): a round's reads, each replaced by
// any read since (a device read again at once because its node's mapping changed). A
// round replaces them all: a node that left, or that a round no longer reads (excluded,
// under maintenance), has no read to show.
type lastReads struct {
	mu    sync.Mutex
	round time.Time
	// by are the reads by node and agent.
	by map[[2]string]fencecall.TargetCheck
}

// replace keeps a round's reads, ended at at, in place of every read before.
func (l *lastReads) replace(checks []fencecall.TargetCheck, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.round, l.by = at, nil
	l.put(checks)
}

// update keeps the reads of some nodes' devices in place of theirs.
func (l *lastReads) update(checks []fencecall.TargetCheck) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.put(checks)
}

func (l *lastReads) put(checks []fencecall.TargetCheck) {
	if l.by == nil {
		l.by = map[[2]string]fencecall.TargetCheck{}
	}
	for _, tc := range checks {
		l.by[[2]string{tc.Node, tc.Agent}] = tc
	}
}

// LastReads are the last read of every node's first-level devices, sorted by node and
// agent, and when the last round of every node's devices ended (zero before the first).
func (m *Monitor) LastReads() ([]fencecall.TargetCheck, time.Time) {
	m.reads.mu.Lock()
	defer m.reads.mu.Unlock()
	out := make([]fencecall.TargetCheck, 0, len(m.reads.by))
	for _, tc := range m.reads.by {
		tc.SharesUUID = slices.Clone(tc.SharesUUID)
		out = append(out, tc)
	}
	slices.SortFunc(out, func(a, b fencecall.TargetCheck) int {
		if c := strings.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return strings.Compare(a.Agent, b.Agent)
	})
	return out, m.reads.round
}
