package incidents

import (
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// Event is an Event of an incident waiting for the incident's next save: on its node,
// or on the incident when the node is gone.
type Event struct {
	Node                  *corev1.Node
	Incident              *v1alpha1.NodeFence
	Type, Reason, Message string
	// HoldWhileFencing: a fence's start in a storm waits at every save while the
	// incident is Fencing, for the Event that ends the fence to absorb it.
	HoldWhileFencing bool
}

// PendingEvents holds each incident's Events until its next save, which follows a
// leader Lease check (invariant 2: Events are mutations too): a replica deposed before
// it saves sends none of them. It only holds them; whoever saves sends them. The zero
// value is ready for use.
type PendingEvents struct {
	mu      sync.Mutex
	pending map[string][]Event
}

// eventFolds: an Event of the key's reason absorbs one of the values' reasons still
// waiting right before it (one or two Events per incident instead of four). Most
// incidents are opened and fenced before their first save, and released right after the
// fence is verified; a start held through a storm's fence (HoldWhileFencing) goes into
// its end.
var eventFolds = map[string][]string{
	v1alpha1.ReasonFenceStarted: {v1alpha1.ReasonDetected},
	v1alpha1.ReasonFenced:       {v1alpha1.ReasonFenceStarted},
	v1alpha1.ReasonFenceFailed:  {v1alpha1.ReasonFenceStarted},
	v1alpha1.ReasonRemediated:   {v1alpha1.ReasonFenced},
}

// Hold keeps e, an Event of e.Incident, for the incident's next save. One Event says
// both, the earlier message first, rather than two a moment apart (eventFolds).
func (p *PendingEvents) Hold(e Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending == nil {
		p.pending = map[string][]Event{}
	}
	queued := p.pending[e.Incident.Name]
	if n := len(queued); n > 0 && slices.Contains(eventFolds[e.Reason], queued[n-1].Reason) {
		e.Message = queued[n-1].Message + ". " + e.Message
		queued[n-1] = e
		return
	}
	p.pending[e.Incident.Name] = append(queued, e)
}

// Take returns the Events the save of nf has just made legitimate. The last one waits
// for the next save if it is a storm's fence start and nf is still Fencing.
func (p *PendingEvents) Take(nf *v1alpha1.NodeFence) []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	pending := p.pending[nf.Name]
	delete(p.pending, nf.Name)
	if n := len(pending); n > 0 && pending[n-1].HoldWhileFencing && nf.Status.Phase == v1alpha1.PhaseFencing {
		p.pending[nf.Name] = []Event{pending[n-1]}
		pending = pending[:n-1]
	}
	return pending
}

// Drop forgets the Events of an incident that is gone.
func (p *PendingEvents) Drop(name string) {
	p.mu.Lock()
	delete(p.pending, name)
	p.mu.Unlock()
}

// Held is how many Events of the incident name wait for its next save.
func (p *PendingEvents) Held(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending[name])
}
