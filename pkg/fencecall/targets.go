package fencecall

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// targetIndex indexes the node cache by agent and target (targetKey), as targetOwners
// maps them.
const targetIndex = "agentTarget"

// Index adds to the node cache inf an index by agent and target, and looks targets up
// in it from then on instead of listing every node at each call.
func (a *Caller) Index(inf cache.SharedIndexInformer) error {
	if err := inf.AddIndexers(cache.Indexers{targetIndex: a.targetKeys}); err != nil {
		return fmt.Errorf("index nodes by target: %w", err)
	}
	a.owned = indexedOwners(inf.GetIndexer())
	return nil
}

func targetKey(agent, target string) string { return agent + "\x00" + target }

// targetKeys are a node's targetIndex keys: one for each configured agent that acts for
// the node (actsFor, as targetOwners asks) and whose target the node resolves.
func (a *Caller) targetKeys(obj any) ([]string, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return nil, nil
	}
	var keys []string
	for name, cfg := range a.config {
		if !a.actsFor(name, node) {
			continue
		}
		if t, err := a.targetOf(cfg, node); err == nil {
			keys = append(keys, targetKey(name, t))
		}
	}
	return keys, nil
}

// indexedOwners looks owners up in a node cache indexed by targetIndex.
func indexedOwners(idx cache.Indexer) func(agent, target string) ([]string, error) {
	return func(agent, target string) ([]string, error) {
		objs, err := idx.ByIndex(targetIndex, targetKey(agent, target))
		if err != nil {
			return nil, err
		}
		names := make([]string, 0, len(objs))
		for _, o := range objs {
			if n, ok := o.(*corev1.Node); ok {
				names = append(names, n.Name)
			}
		}
		return names, nil
	}
}
