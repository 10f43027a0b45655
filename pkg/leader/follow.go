package leader

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/caches/tombstone"
)

// Follow keeps r current from identities, an informer on the replicas' identity Leases
// (ReplicaSelector): each Lease added or updated is observed at now(), each deleted one
// forgotten. A replica that leaves (its Lease deleted on a clean exit) no longer holds
// its node back.
func (r *Replicas) Follow(identities cache.SharedIndexInformer, now func() time.Time) error {
	observe := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			r.Observe(l, now())
		}
	}
	if _, err := identities.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(obj any) {
			if l, ok := tombstone.Unwrap(obj).(*coordinationv1.Lease); ok {
				r.Forget(l.Name)
			}
		},
	}); err != nil {
		return fmt.Errorf("watch identity leases: %w", err)
	}
	return nil
}
