package nodeview

import "sync"

// DryRunReports remembers which unhealthy episodes of each node (keyed by when their
// evidence started) were already reported in dry run, so that each is reported once. A
// node's entry goes once it is healthy again or deleted (Forget), so it holds only nodes
// that are unhealthy now. The zero DryRunReports remembers nothing.
type DryRunReports struct {
	mu   sync.Mutex
	seen map[string]map[string]bool
}

// First records the episode of node keyed since and says whether it is the
// first time it is seen, that is, whether to report it.
func (r *DryRunReports) First(node, since string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]map[string]bool{}
	}
	episodes := r.seen[node]
	if episodes == nil {
		episodes = map[string]bool{}
		r.seen[node] = episodes
	}
	seen := episodes[since]
	episodes[since] = true
	return !seen
}

// Forget forgets the episodes reported for a node that is healthy again or deleted; its
// next unhealthy episode is reported anew.
func (r *DryRunReports) Forget(node string) {
	r.mu.Lock()
	delete(r.seen, node)
	r.mu.Unlock()
}

// Nodes is how many nodes have an episode remembered.
func (r *DryRunReports) Nodes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}
