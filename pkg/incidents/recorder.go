package incidents

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/buildinfo"
)

// Guard is the leader's standing the record is written under (leader.Guard).
type Guard interface {
	// Confirmed passes when a Lease check passed within the renew deadline, and checks
	// the Lease again otherwise.
	Confirmed(ctx context.Context) error
	// Epoch is the fencing epoch this replica acts at.
	Epoch() int64
	// Deposed stops the replica when err says a newer leader wrote first.
	Deposed(err error)
}

// Recorder is how every controller that writes an incident records it: a timeline step,
// an Event held until the incident's next save, and the save at this replica's epoch and
// name. pkg/app makes one and hands it to the incident loop and to the peers that write
// incidents (the orphan repair).
type Recorder struct {
	Store *Store
	Guard Guard
	// Identity names this replica (hostname_PID_suffix) on what it saves.
	Identity string
	// Events sends the Events; nil sends none.
	Events record.EventRecorder
	// Now is the clock of the steps the recorder dates itself.
	Now func() time.Time
	// Fencing counts the nodes fencing now, to tell a storm (StormAt); nil: never one.
	Fencing Fencing

	held PendingEvents
}

// Fencing counts the nodes fencing at now, from the cached incidents and the fences
// decided that the cache does not show yet (nodeview.Admission).
type Fencing interface {
	FencingNow(cached []*v1alpha1.NodeFence, now time.Time) int
}

// StormAt is how many nodes fencing at once make a storm for Events: from then on an
// incident's start is not an Event of its own but opens the one that ends its fencing
// (Remediated, or FenceFailed). Below it, an operator watching one node sees its fence
// start while the BMC works; in a storm, one Event per node says it all, and client-go's
// broadcaster drops what its queue of 1,000 cannot hold anyway.
const StormAt = 10

// Storm reports whether StormAt nodes or more are fencing now.
func (r *Recorder) Storm() bool {
	return r.Fencing != nil && r.Fencing.FencingNow(r.Store.Cached(), r.Now()) >= StormAt
}

// Step adds a timeline step to nf, now.
func (r *Recorder) Step(ctx context.Context, nf *v1alpha1.NodeFence, typ, msg string) {
	r.StepAt(ctx, nf, r.Now(), typ, msg)
}

// StepAt adds a timeline step to nf and logs it with the context's keys (node and
// incident): the log carries every step an incident takes, as its timeline does.
func (r *Recorder) StepAt(ctx context.Context, nf *v1alpha1.NodeFence, at time.Time, typ, msg string) {
	AddStep(&nf.Status, at, typ, msg)
	klog.FromContext(ctx).Info("Incident step", "step", typ, "message", msg)
}

// Event records an Event on the node, or on the incident when the node is gone (Hold).
// Not on both: the incident's timeline already holds every step with its time and
// detail, and a second copy of each Event doubled the controller's requests per incident.
// Operators find them where they look first, on the node (`kubectl describe node`,
// `kubectl get events --field-selector involvedObject.kind=Node`). In a storm the start
// of a fence is told with its end (HoldWhileFencing).
func (r *Recorder) Event(node *corev1.Node, nf *v1alpha1.NodeFence, typ, reason, format string, args ...any) {
	if r.Events == nil {
		return
	}
	e := Event{Node: node, Incident: nf, Type: typ, Reason: reason, Message: fmt.Sprintf(format, args...)}
	e.HoldWhileFencing = nf != nil && reason == v1alpha1.ReasonFenceStarted && r.Storm()
	r.Hold(e)
}

// Hold keeps e, an Event of e.Incident, until the incident's next save (PendingEvents).
// An Event of no incident goes out at once: it follows a Lease check of its own.
func (r *Recorder) Hold(e Event) {
	switch {
	case r.Events == nil:
	case e.Incident == nil:
		r.emit(e)
	default:
		r.held.Hold(e)
	}
}

// takenUp records that this replica took up an incident prev wrote last: across a
// handover, an upgrade or a rollback the timeline says which replica, of which release,
// went on with it. The step goes before the steps this replica added since the incident
// as prev left it (the stored copy), dated as the first of them: what follows it is what
// this replica did.
func (r *Recorder) takenUp(ctx context.Context, nf *v1alpha1.NodeFence, prev string) {
	msg := fmt.Sprintf("taken up by %s (fence-controller %s) from %s", r.Identity, buildinfo.Version(), prev)
	at, n := r.Now(), len(nf.Status.Timeline)
	if left := r.Store.Get(nf.Name); left != nil && left.Status.Leader == prev && len(left.Status.Timeline) < n {
		n = len(left.Status.Timeline)
		at = nf.Status.Timeline[n].Time.Time
	}
	step := v1alpha1.Step{Time: metav1.NewMicroTime(at), Type: v1alpha1.StepTakenUp, Message: msg}
	nf.Status.Timeline = slices.Insert(slices.Clone(nf.Status.Timeline), n, step)
	klog.FromContext(ctx).Info("Incident step", "step", v1alpha1.StepTakenUp, "message", msg)
}

func (r *Recorder) emit(e Event) {
	if e.Node != nil {
		r.Events.Event(e.Node, e.Type, e.Reason, e.Message)
	} else if e.Incident != nil {
		r.Events.Event(e.Incident, e.Type, e.Reason, e.Message)
	}
}

// Save persists the incident's status at this replica's epoch, keeps the fresh copy in
// nf, and sends the Events the save has just made legitimate. It follows a Lease check
// that passed within the renew deadline (Guard.Confirmed): the resourceVersion only
// catches a newer leader that has already written this incident, not one that has not
// touched it yet, and no standby can take over within the renew deadline of a check that
// found this replica leading. A check of its own per save cost a read of the leader Lease
// on the critical path of every incident; the one read that must be fresh is the one
// before an agent's Fence call (pkg/controller's fence.go).
func (r *Recorder) Save(ctx context.Context, nf *v1alpha1.NodeFence) error {
	if err := r.Guard.Confirmed(ctx); err != nil {
		return err
	}
	if prev := nf.Status.Leader; prev != "" && prev != r.Identity && nf.Status.Phase.Open() {
		r.takenUp(ctx, nf, prev)
	}
	saved, err := r.Store.WriteStatus(ctx, nf, r.Guard.Epoch(), r.Identity)
	if err != nil {
		r.Guard.Deposed(err)
		return err
	}
	*nf = *saved
	if r.Events != nil {
		for _, e := range r.held.Take(nf) {
			r.emit(e)
		}
	}
	return nil
}

// Drop forgets the held Events of an incident that is gone.
func (r *Recorder) Drop(name string) { r.held.Drop(name) }

// Held is how many Events of the incident name wait for its next save.
func (r *Recorder) Held(name string) int { return r.held.Held(name) }
