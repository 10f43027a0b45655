package incidents

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/coalesce"
	fencingclient "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/typed/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/leader"
)

// Store reads NodeFences from the informer cache and writes them to the API server.
type Store struct {
	client  fencingclient.NodeFenceInterface
	indexer cache.Indexer
	// openReads is the live list of open incidents that incidents opened at once share.
	openReads *coalesce.Read[[]v1alpha1.NodeFence]

	// written holds this replica's last write of each incident until the cache shows it.
	// The leader is the only writer of status, so a cached copy with another
	// resourceVersion is one the watch has not caught up on; working from it would only
	// earn a conflict and a retry. A write by anyone else still fails the compare-and-swap
	// and drops the entry.
	mu      sync.Mutex
	written map[string]*v1alpha1.NodeFence
}

// Fresh returns the newer of the cached incident and this replica's last write of it.
func (s *Store) Fresh(nf *v1alpha1.NodeFence) *v1alpha1.NodeFence {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.written[nf.Name]
	switch {
	case !ok:
		return nf
	case w.ResourceVersion == nf.ResourceVersion:
		delete(s.written, nf.Name)
		return nf
	}
	return w.DeepCopy()
}

// Get returns the named incident from the cache or this replica's newer write of it,
// nil when neither holds it.
func (s *Store) Get(name string) *v1alpha1.NodeFence {
	obj, ok, err := s.indexer.GetByKey(name)
	if nf, isNF := obj.(*v1alpha1.NodeFence); err == nil && ok && isNF {
		return s.Fresh(nf)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.written[name]; ok {
		return w.DeepCopy()
	}
	return nil
}

func (s *Store) remember(nf *v1alpha1.NodeFence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written == nil {
		s.written = map[string]*v1alpha1.NodeFence{}
	}
	s.written[nf.Name] = nf.DeepCopy()
}

func (s *Store) Forget(name string) {
	s.mu.Lock()
	delete(s.written, name)
	s.mu.Unlock()
}

// unseen returns this replica's writes of a node's incidents the cache does not hold yet.
func (s *Store) unseen(node string, cached map[string]bool) []*v1alpha1.NodeFence {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*v1alpha1.NodeFence
	for name, w := range s.written {
		if w.Spec.NodeName == node && !cached[name] {
			out = append(out, w.DeepCopy())
		}
	}
	return out
}

const byNodeIndex = "byNode"

// New is the store of the incidents inf caches (it adds the indexes it reads by) and
// client writes.
func New(client fencingclient.NodeFenceInterface, inf cache.SharedIndexInformer) (*Store, error) {
	if err := inf.AddIndexers(nodeFenceIndexers()); err != nil {
		return nil, fmt.Errorf("index incidents: %w", err)
	}
	return &Store{client: client, indexer: inf.GetIndexer(), openReads: sharedOpenReads(client)}, nil
}

// Cached are every cached incident, as the informer holds them: read them, never change
// them.
func (s *Store) Cached() []*v1alpha1.NodeFence {
	objs := s.indexer.List()
	out := make([]*v1alpha1.NodeFence, 0, len(objs))
	for _, o := range objs {
		if nf, ok := o.(*v1alpha1.NodeFence); ok {
			out = append(out, nf)
		}
	}
	return out
}

// Client writes NodeFences.
func (s *Store) Client() fencingclient.NodeFenceInterface { return s.client }

func nodeFenceIndexers() cache.Indexers {
	return cache.Indexers{byNodeIndex: func(obj any) ([]string, error) {
		nf, ok := obj.(*v1alpha1.NodeFence)
		if !ok {
			return nil, nil
		}
		return []string{nf.Spec.NodeName}, nil
	}}
}

// cached is a NodeFence from the informer cache, which nobody may change.
func cached(obj any) (*v1alpha1.NodeFence, error) {
	nf, ok := obj.(*v1alpha1.NodeFence)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T in NodeFence cache", obj)
	}
	return nf, nil
}

// ForNode returns every cached NodeFence of a node.
func (s *Store) ForNode(node string) ([]*v1alpha1.NodeFence, error) {
	objs, err := s.indexer.ByIndex(byNodeIndex, node)
	if err != nil {
		return nil, err
	}
	out := make([]*v1alpha1.NodeFence, 0, len(objs))
	seen := make(map[string]bool, len(objs))
	for _, o := range objs {
		nf, err := cached(o)
		if err != nil {
			return nil, err
		}
		seen[nf.Name] = true
		out = append(out, s.Fresh(nf).DeepCopy())
	}
	return append(out, s.unseen(node, seen)...), nil
}

// OpenLive lists the node's open incidents from the API server itself, so that a cache
// that has not yet seen a fresh incident cannot lead to a second one (invariant 3).
// Incidents opened at once share one read, sent after each of them asked: it
// selects the open incidents of every node by status.phase, a selectable field of the
// CRD, and each caller keeps its node's. An API server that refuses the selector (a
// CRD from before status.phase was selectable, or Kubernetes before 1.31) gets a list of
// every incident instead.
func (s *Store) OpenLive(ctx context.Context, node string) ([]*v1alpha1.NodeFence, error) {
	res, err := s.openReads.Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("list incidents of node %s: %w", node, err)
	}
	var out []*v1alpha1.NodeFence
	for i := range res.Value {
		if nf := &res.Value[i]; nf.Spec.NodeName == node && nf.Status.Phase.Open() {
			out = append(out, nf.DeepCopy())
		}
	}
	return out, nil
}

// OpenIncidentsSelector selects the incidents that are not over, new ones (no phase yet)
// included.
var OpenIncidentsSelector = v1alpha1.PhaseNotIn(v1alpha1.EndedPhases...)

// openReadTimeout bounds one shared list of open incidents.
const openReadTimeout = 30 * time.Second

// sharedOpenReads is the read of every open incident that openLive's callers share.
func sharedOpenReads(client fencingclient.NodeFenceInterface) *coalesce.Read[[]v1alpha1.NodeFence] {
	return &coalesce.Read[[]v1alpha1.NodeFence]{Timeout: openReadTimeout,
		Do: func(ctx context.Context) ([]v1alpha1.NodeFence, error) {
			list, err := client.List(ctx, metav1.ListOptions{FieldSelector: OpenIncidentsSelector})
			if apierrors.IsBadRequest(err) {
				list, err = client.List(ctx, metav1.ListOptions{})
			}
			if err != nil {
				return nil, err
			}
			return list.Items, nil
		}}
}

// Create creates the incident. Its status is not written yet: it is returned with nf's
// status, which the first decision on the incident writes (saving a request per
// incident); until then the incident reads as a fresh request, and is decided as one.
// The status is not sent either: the API server drops a new object's status (the status
// subresource) only after decoding, pruning and tracking its fields.
func (s *Store) Create(ctx context.Context, nf *v1alpha1.NodeFence) (*v1alpha1.NodeFence, error) {
	req := *nf
	req.Status = v1alpha1.NodeFenceStatus{}
	out, err := s.client.Create(ctx, &req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create incident for node %s: %w", nf.Spec.NodeName, err)
	}
	out.Status = *nf.Status.DeepCopy()
	return out, nil
}

// WriteStatus writes nf's status if the stored object still has nf's resourceVersion
// and no newer epoch has written it.
func (s *Store) WriteStatus(ctx context.Context, nf *v1alpha1.NodeFence, epoch int64, identity string) (*v1alpha1.NodeFence, error) {
	if nf.Status.Epoch > epoch {
		return nil, fmt.Errorf("write incident %s at epoch %d, stored epoch is %d: %w", nf.Name, epoch, nf.Status.Epoch, leader.ErrStaleEpoch)
	}
	nf.Status.Epoch, nf.Status.Leader = epoch, identity
	ClampStatus(&nf.Status)
	saved, err := s.client.UpdateStatus(ctx, nf, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		s.Forget(nf.Name)
		// Someone wrote in between: find out whether it was a newer leader.
		if stored, gerr := s.client.Get(ctx, nf.Name, metav1.GetOptions{}); gerr == nil && stored.Status.Epoch > epoch {
			return nil, fmt.Errorf("write incident %s at epoch %d, stored epoch is %d: %w", nf.Name, epoch, stored.Status.Epoch, leader.ErrStaleEpoch)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("write incident %s: %w", nf.Name, err)
	}
	s.remember(saved)
	return saved, nil
}

// Facts are what policy needs of an incident, read straight from the cached object.
type Facts struct {
	Phase      v1alpha1.Phase
	FenceStart time.Time
	// Verified: a level of the incident was read back as fenced.
	Verified bool
	// EvidenceStart is when the evidence the incident opened on turned bad; zero when
	// not recorded.
	EvidenceStart time.Time
}

// FailedAt is when nf's node failed: when the evidence the incident opened on turned bad,
// or, for a request that recorded none (a person's, a health checker's), its creation.
func FailedAt(nf *v1alpha1.NodeFence) time.Time {
	if at := FactsOf(nf).EvidenceStart; !at.IsZero() {
		return at
	}
	return nf.CreationTimestamp.Time
}

// FactsOf are nf's facts; none for an object that is not a NodeFence.
func FactsOf(obj any) Facts {
	nf, ok := obj.(*v1alpha1.NodeFence)
	if !ok {
		return Facts{}
	}
	f := Facts{Phase: nf.Status.Phase, Verified: nf.Status.Verified()}
	for _, st := range nf.Status.Timeline {
		switch {
		case st.Type == v1alpha1.StepEvidenceStarted && f.EvidenceStart.IsZero():
			f.EvidenceStart = st.Time.Time
		case st.Type == v1alpha1.StepFenceStarted && f.FenceStart.IsZero():
			f.FenceStart = st.Time.Time
		}
	}
	return f
}

// FactsForNode returns the facts of every cached incident of a node.
func (s *Store) FactsForNode(node string) []Facts {
	objs, err := s.indexer.ByIndex(byNodeIndex, node)
	if err != nil {
		return nil
	}
	out := make([]Facts, 0, len(objs))
	for _, o := range objs {
		out = append(out, FactsOf(o))
	}
	return out
}

// OpenNodes are the nodes with an open incident in the cache.
func (s *Store) OpenNodes() map[string]bool {
	open := map[string]bool{}
	for _, obj := range s.indexer.List() {
		if nf, ok := obj.(*v1alpha1.NodeFence); ok && nf.Status.Phase.Open() {
			open[nf.Spec.NodeName] = true
		}
	}
	return open
}

// Open returns the node's open incident from the cache. Two open incidents for one node
// would break invariant 3; the oldest is the one the loop drives, and the others are
// reported.
func (s *Store) Open(node string) (*v1alpha1.NodeFence, error) {
	all, err := s.ForNode(node)
	if err != nil {
		return nil, fmt.Errorf("incidents of node %s: %w", node, err)
	}
	oldest := OldestOpen(all)
	if oldest == nil {
		return nil, nil
	}
	if open := countOpen(all); open > 1 {
		klog.ErrorS(nil, "Several open incidents for one node; driving the oldest", "node", node, "incidents", open)
	}
	return oldest, nil
}

// OldestOpen is the oldest open incident of one node's nfs, the one the loop drives
// (and explain says it decides on): the first created, of two created in the same second
// the first by name. nil when none is open.
func OldestOpen(nfs []*v1alpha1.NodeFence) *v1alpha1.NodeFence {
	var oldest *v1alpha1.NodeFence
	for _, nf := range nfs {
		if !nf.Status.Phase.Open() {
			continue
		}
		if oldest == nil || nf.CreationTimestamp.Before(&oldest.CreationTimestamp) ||
			(nf.CreationTimestamp.Equal(&oldest.CreationTimestamp) && nf.Name < oldest.Name) {
			oldest = nf
		}
	}
	return oldest
}

func countOpen(nfs []*v1alpha1.NodeFence) int {
	n := 0
	for _, nf := range nfs {
		if nf.Status.Phase.Open() {
			n++
		}
	}
	return n
}
