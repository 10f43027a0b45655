package leader

import (
	"fmt"
	"sync"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

// Replicas knows which nodes run a live replica of the controller, from the replicas'
// identity Leases (labelled with their node): a replica that renews its Lease is proof
// that its node is alive, and no replica may fence the node it runs on. Renewals are
// timed on this process's clock, as the detector times node Leases, so that a replica's
// skewed clock can neither hide nor fake one.
type Replicas struct {
	// self is the node this replica runs on; empty when unknown (outside a pod).
	self string
	// window is how long after a renewal was seen a replica still counts as alive.
	window time.Duration

	mu   sync.Mutex
	seen map[string]replicaSeen // by Lease name
}

type replicaSeen struct {
	node, holder string
	renew        time.Time
	// at is when this process saw renew change, or first saw the Lease.
	at time.Time
}

// ReplicaSelector selects the controller replicas' identity Leases, in the namespace of
// the leader election: what Replicas follows, in the incident loop's cache and in
// explain's read alike.
const ReplicaSelector = IdentityLabel + "=true," + ComponentLabel + "=controller"

// replicaWindowRenewals is how many identity renewal intervals a replica may miss before
// its node no longer counts as hosting a live replica.
const replicaWindowRenewals = 3

// NewReplicas knows the replicas of the controller seen from the one on node self (empty
// outside a pod), which renew their identity Leases every renewInterval.
func NewReplicas(self string, renewInterval time.Duration) *Replicas {
	return &Replicas{self: self, window: replicaWindowRenewals * renewInterval, seen: map[string]replicaSeen{}}
}

// Observe records an identity Lease of a controller replica as seen at now. A Lease seen
// for the first time counts as a renewal: a replica is presumed alive until it has been
// silent for the window, which only ever holds a fence back.
func (r *Replicas) Observe(lease *coordinationv1.Lease, now time.Time) {
	// The whole name is in the annotation; replicas from before it wrote only the label,
	// which is the whole name when it fits.
	node := lease.Annotations[v1alpha1.NodeAnnotation]
	if node == "" {
		node = lease.Labels[v1alpha1.NodeLabel]
	}
	if node == "" || lease.Spec.RenewTime == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.seen[lease.Name]
	if ok && old.renew.Equal(lease.Spec.RenewTime.Time) && old.node == node {
		return
	}
	r.seen[lease.Name] = replicaSeen{node: node, holder: ptr.Deref(lease.Spec.HolderIdentity, ""), renew: lease.Spec.RenewTime.Time, at: now}
}

// Forget drops a deleted identity Lease.
func (r *Replicas) Forget(name string) {
	r.mu.Lock()
	delete(r.seen, name)
	r.mu.Unlock()
}

// On returns the evidence that a live replica runs on node at now, or "", and when that
// evidence lapses unless the replica renews again: the end of the window after the
// latest renewal seen, zero for this replica's own node (which never lapses) and for a
// node with no live replica. A hold on it can be looked at again right then.
func (r *Replicas) On(node string, now time.Time) (evidence string, until time.Time) {
	if r == nil {
		return "", time.Time{}
	}
	if r.self != "" && node == r.self {
		return "this replica runs on it", time.Time{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var latest *replicaSeen
	for _, s := range r.seen {
		if s.node == node && now.Sub(s.at) < r.window && (latest == nil || s.at.After(latest.at)) {
			latest = &s
		}
	}
	if latest == nil {
		return "", time.Time{}
	}
	// When, not how long ago: the evidence is the hold's message, and a message that
	// changed at every sync would record the hold again at every sync (a status write,
	// an Event and a metric each time).
	return fmt.Sprintf("replica %s was last seen renewing its identity Lease at %s", latest.holder, latest.at.UTC().Format(time.RFC3339Nano)),
		latest.at.Add(r.window)
}
