package detector

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubefence/kubefence/pkg/coalesce"
)

// LeaseNamespace is where kubelets keep their heartbeat Leases.
const LeaseNamespace = "kube-node-lease"

// leaseListAt is how many node Leases read at once are read with one LIST of them all
// rather than one GET each: a LIST costs the API server more than a GET, and fewer than
// that many incidents rarely open together.
const leaseListAt = 8

// leaseReadTimeout bounds one shared read of node Leases.
const leaseReadTimeout = 30 * time.Second

// LeaseReads reads node Leases live for the incidents about to open (confirmStale),
// sharing one read among those that ask together: a read sent after each of
// them asked, GETs for a few, one LIST of the namespace for many. A Lease the read did
// not find is missing from the map.
func LeaseReads(client kubernetes.Interface) *coalesce.Batch[string, *coordinationv1.Lease] {
	leases := client.CoordinationV1().Leases(LeaseNamespace)
	return &coalesce.Batch[string, *coordinationv1.Lease]{Timeout: leaseReadTimeout,
		Do: func(ctx context.Context, names []string) (map[string]*coordinationv1.Lease, error) {
			out := make(map[string]*coordinationv1.Lease, len(names))
			if len(names) >= leaseListAt {
				list, err := leases.List(ctx, metav1.ListOptions{})
				if err != nil {
					return nil, err
				}
				for i := range list.Items {
					out[list.Items[i].Name] = &list.Items[i]
				}
				return out, nil
			}
			var mu sync.Mutex
			var errs []error
			var wg sync.WaitGroup
			for _, name := range names {
				wg.Go(func() {
					l, err := leases.Get(ctx, name, metav1.GetOptions{})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						out[name] = l
					case !apierrors.IsNotFound(err):
						errs = append(errs, err)
					}
				})
			}
			wg.Wait()
			if len(errs) > 0 {
				return nil, errs[0]
			}
			return out, nil
		}}
}
