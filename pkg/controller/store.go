package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/coalesce"
	"github.com/kubefence/kubefence/pkg/fencer"
	fencingclient "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/typed/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/leader"
)

// store reads NodeFences from the informer cache and writes them to the API server.
type store struct {
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

// fresh returns the newer of the cached incident and this replica's last write of it.
func (s *store) fresh(nf *v1alpha1.NodeFence) *v1alpha1.NodeFence {
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

// get returns the named incident from the cache or this replica's newer write of it,
// nil when neither holds it.
func (s *store) get(name string) *v1alpha1.NodeFence {
	obj, ok, err := s.indexer.GetByKey(name)
	if nf, isNF := obj.(*v1alpha1.NodeFence); err == nil && ok && isNF {
		return s.fresh(nf)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.written[name]; ok {
		return w.DeepCopy()
	}
	return nil
}

func (s *store) remember(nf *v1alpha1.NodeFence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written == nil {
		s.written = map[string]*v1alpha1.NodeFence{}
	}
	s.written[nf.Name] = nf.DeepCopy()
}

func (s *store) forget(name string) {
	s.mu.Lock()
	delete(s.written, name)
	s.mu.Unlock()
}

// unseen returns this replica's writes of a node's incidents the cache does not hold yet.
func (s *store) unseen(node string, cached map[string]bool) []*v1alpha1.NodeFence {
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

// forNode returns every cached NodeFence of a node.
func (s *store) forNode(node string) ([]*v1alpha1.NodeFence, error) {
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
		out = append(out, s.fresh(nf).DeepCopy())
	}
	return append(out, s.unseen(node, seen)...), nil
}

// openLive lists the node's open incidents from the API server itself, so that a cache
// that has not yet seen a fresh incident cannot lead to a second one (invariant 3).
// Incidents opened at once share one read, sent after each of them asked (issue 24): it
// selects the open incidents of every node by status.phase, a selectable field of the
// CRD, and each caller keeps its node's. An API server that refuses the selector (a
// CRD from before status.phase was selectable, or Kubernetes before 1.31) gets a list of
// every incident instead.
func (s *store) openLive(ctx context.Context, node string) ([]*v1alpha1.NodeFence, error) {
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

// create creates the incident. Its status is not written yet: it is returned with nf's
// status, which the first decision on the incident writes (saving a request per
// incident); until then the incident reads as a fresh request, and is decided as one.
// The status is not sent either: the API server drops a new object's status (the status
// subresource) only after decoding, pruning and tracking its fields (issue 24).
func (s *store) create(ctx context.Context, nf *v1alpha1.NodeFence) (*v1alpha1.NodeFence, error) {
	req := *nf
	req.Status = v1alpha1.NodeFenceStatus{}
	out, err := s.client.Create(ctx, &req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create incident for node %s: %w", nf.Spec.NodeName, err)
	}
	out.Status = *nf.Status.DeepCopy()
	return out, nil
}

// writeStatus writes nf's status if the stored object still has nf's resourceVersion
// and no newer epoch has written it.
func (s *store) writeStatus(ctx context.Context, nf *v1alpha1.NodeFence, epoch int64, identity string) (*v1alpha1.NodeFence, error) {
	if nf.Status.Epoch > epoch {
		return nil, fmt.Errorf("write incident %s at epoch %d, stored epoch is %d: %w", nf.Name, epoch, nf.Status.Epoch, leader.ErrStaleEpoch)
	}
	nf.Status.Epoch, nf.Status.Leader = epoch, identity
	clampStatus(&nf.Status)
	saved, err := s.client.UpdateStatus(ctx, nf, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		s.forget(nf.Name)
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

// facts is what policy needs of an incident, read straight from the cached object.
type facts struct {
	phase      v1alpha1.Phase
	fenceStart time.Time
	// verified: a level of the incident was read back as fenced.
	verified bool
}

func factsOf(obj any) facts {
	nf, ok := obj.(*v1alpha1.NodeFence)
	if !ok {
		return facts{}
	}
	f := facts{phase: nf.Status.Phase, verified: nf.Status.Verified()}
	for _, st := range nf.Status.Timeline {
		if st.Type == v1alpha1.StepFenceStarted {
			f.fenceStart = st.Time.Time
			break
		}
	}
	return f
}

// factsForNode returns the facts of every cached incident of a node.
func (s *store) factsForNode(node string) []facts {
	objs, err := s.indexer.ByIndex(byNodeIndex, node)
	if err != nil {
		return nil
	}
	out := make([]facts, 0, len(objs))
	for _, o := range objs {
		out = append(out, factsOf(o))
	}
	return out
}

// openNodes are the nodes with an open incident in the cache.
func (s *store) openNodes() map[string]bool {
	open := map[string]bool{}
	for _, obj := range s.indexer.List() {
		if nf, ok := obj.(*v1alpha1.NodeFence); ok && nf.Status.Phase.Open() {
			open[nf.Spec.NodeName] = true
		}
	}
	return open
}

// maxText is how much free text (a message, evidence, an error) the controller writes in
// one field: a quarter of the CRD's limit, so that a whole status stays far inside the
// API server's limit on an object's size.
const maxText = 8192

// clampStatus cuts what the controller writes to the CRD's limits: a status the API
// server refuses would stop the incident where it stands, for the sake of a long message
// or an agent's odd error kind.
func clampStatus(st *v1alpha1.NodeFenceStatus) {
	st.Message = clampText(st.Message, maxText)
	for i := range st.Timeline {
		st.Timeline[i].Message = clampText(st.Timeline[i].Message, maxText)
	}
	trimTimeline(st)
	for i := range st.Attempts {
		a := &st.Attempts[i]
		a.Evidence, a.Error = clampText(a.Evidence, maxText), clampText(a.Error, maxText)
		a.ErrorKind, a.PowerState = clampText(a.ErrorKind, 64), clampText(a.PowerState, 32)
		a.Target, a.FenceEvidence = clampText(a.Target, 1024), clampText(a.FenceEvidence, fencer.MaxFenceEvidence)
	}
}

// clampText cuts s to at most limit bytes of valid UTF-8, saying so when it cuts.
func clampText(s string, limit int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= limit {
		return s
	}
	cut := "... (cut)"
	if limit <= len(cut) {
		cut = ""
	}
	end := limit - len(cut)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + cut
}
