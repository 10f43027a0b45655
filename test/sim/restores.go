package sim

import (
	"fmt"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// restore is a node's storage access coming back: when the monitor saw its initiator
// admitted again, and the boot the node ran then.
type restore struct {
	at   time.Time
	boot string
}

// noteRestore records that node's storage access came back at now; m.mu is held.
func (m *Monitor) noteRestore(node string, now time.Time) {
	if m.restored == nil {
		m.restored = map[string][]restore{}
	}
	m.restored[node] = append(m.restored[node], restore{at: now, boot: m.h.Cluster.Node(node).BootID()})
}

// checkRestores: a node gets its storage back only on proof of a power cycle (invariant
// 8), never while an incident whose fence held on the boot the node still runs has not
// recovered. The way it could: a deposed leader's late Unfence, restoring what an
// earlier incident cut while its successor's new incident holds the same cut.
func (m *Monitor) checkRestores(ev Evidence) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var v []string
	for node, rs := range m.restored {
		for _, r := range rs {
			for _, nf := range ev.Incidents[node] {
				if nf.Status.BootID == "" || nf.Status.BootID != r.boot {
					continue
				}
				if p := phaseAt(ev.Seen, nf.Name, r.at); p == string(v1alpha1.PhaseFenced) || p == string(v1alpha1.PhaseRemediated) {
					v = append(v, fmt.Sprintf("node %s's storage access came back at %s on boot %s, while incident %s (%s) held its fence on that boot",
						node, r.at.Format(time.RFC3339Nano), r.boot, nf.Name, p))
				}
			}
		}
	}
	return v
}

// phaseAt is the phase the recorder last saw incident in at or before t; "" if none.
func phaseAt(seen []Seen, incident string, t time.Time) string {
	phase := ""
	for _, s := range seen {
		if s.Kind == SeenIncidentPhase && s.Object == incident && !s.At.After(t) {
			phase = s.Detail
		}
	}
	return phase
}
