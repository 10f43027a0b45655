package maintenance

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// The optional kinds Reader follows, each in the versions it reads, newest first: the
// first one the API server serves is watched. Both keep the node's name at one path.
var (
	machineVersions = []schema.GroupVersionResource{
		{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"},
		{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machines"},
	}
	nodeMaintenanceVersions = []schema.GroupVersionResource{
		{Group: "nodemaintenance.medik8s.io", Version: "v1beta1", Resource: "nodemaintenances"},
	}
	// machineNodePath is where a Machine names its Node (Cluster API v1beta1 and v1beta2).
	machineNodePath = []string{"status", "nodeRef", "name"}
	// nodeMaintenanceNodePath is where a NodeMaintenance names its Node.
	nodeMaintenanceNodePath = []string{"spec", "nodeName"}
)

const byNodeIndex = "byNode"

// discoveryBackoff paces the tries of a discovery request that failed: an API server too
// busy to answer in time when the controller starts (a control plane under load) delays
// the start by up to 15 s of waits, rather than failing it. A refusal (not authorized,
// forbidden) is not tried again.
var discoveryBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: 5}

// Discovery is the part of the discovery client Reader asks which versions are served.
type Discovery interface {
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// RediscoverEvery is how often Run asks again for a kind that was not served: a
// CustomResourceDefinition installed after the controller started is followed within it.
const RediscoverEvery = 30 * time.Second

// Reader finds the Machines and NodeMaintenances that name a node, from informers of the
// shared dynamic factory. A kind whose CustomResourceDefinition is not installed when New
// runs is followed once Run finds it served.
type Reader struct {
	disc    Discovery
	factory dynamicinformer.DynamicSharedInformerFactory

	mu                     sync.RWMutex
	machines, maintenances cache.Indexer
}

// New asks discovery which of the optional kinds are served and adds an informer for each
// to factory, which the caller starts. A nil factory reads nothing.
func New(disc Discovery, factory dynamicinformer.DynamicSharedInformerFactory) (*Reader, error) {
	r := &Reader{disc: disc, factory: factory}
	if factory == nil {
		return r, nil
	}
	if _, err := r.followServed(); err != nil {
		return nil, err
	}
	return r, nil
}

// Read is a Reader of what the API server holds now, for a one-shot command (explain):
// the informers the controller's Reader runs, on a factory of their own, synced before it
// returns and then stopped; the Reader keeps what they hold. It fails when ctx ends
// first (a list that RBAC forbids never syncs).
func Read(ctx context.Context, disc Discovery, client dynamic.Interface) (*Reader, error) {
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	r, err := New(disc, factory)
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	for gvr, synced := range factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			return nil, fmt.Errorf("read %s: %w", gvr.Resource, context.Cause(ctx))
		}
	}
	return r, nil
}

// followServed adds an informer for each kind not yet followed that is served now, and
// reports whether it added one.
func (r *Reader) followServed() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	added := false
	for _, k := range []struct {
		idx      *cache.Indexer
		versions []schema.GroupVersionResource
		nodePath []string
	}{{&r.machines, machineVersions, machineNodePath}, {&r.maintenances, nodeMaintenanceVersions, nodeMaintenanceNodePath}} {
		if *k.idx != nil {
			continue
		}
		idx, err := follow(r.disc, r.factory, k.versions, k.nodePath)
		if err != nil {
			return added, err
		}
		*k.idx, added = idx, added || idx != nil
	}
	return added, nil
}

// Run asks every interval for the kinds not followed yet, and starts an informer for each
// that has come to be served, until ctx ends. A failed discovery is logged and asked again.
func (r *Reader) Run(ctx context.Context, interval time.Duration) {
	if r == nil || r.factory == nil {
		return
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		added, err := r.followServed()
		if err != nil {
			klog.FromContext(ctx).Error(err, "Discovery of the planned-absence kinds failed; asking again later")
		}
		if added {
			klog.FromContext(ctx).Info("Following a planned-absence kind installed after the start")
			r.factory.Start(ctx.Done())
		}
	}, interval)
}

// follow adds an informer for the first served version of a kind, indexed by the node
// named at nodePath and trimmed to what Objects reads; nil when none is served.
func follow(disc Discovery, factory dynamicinformer.DynamicSharedInformerFactory, versions []schema.GroupVersionResource, nodePath []string) (cache.Indexer, error) {
	gvr, ok, err := served(disc, versions)
	if err != nil || !ok {
		return nil, err
	}
	inf := factory.ForResource(gvr).Informer()
	if err := inf.SetTransform(func(obj any) (any, error) { return trim(obj, nodePath), nil }); err != nil {
		return nil, fmt.Errorf("trim cache of %s: %w", gvr.Resource, err)
	}
	byNode := func(obj any) ([]string, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if n, _, _ := unstructured.NestedString(u.Object, nodePath...); n != "" {
				return []string{n}, nil
			}
		}
		return nil, nil
	}
	if err := inf.AddIndexers(cache.Indexers{byNodeIndex: byNode}); err != nil {
		return nil, fmt.Errorf("index %s by node: %w", gvr.Resource, err)
	}
	return inf.GetIndexer(), nil
}

// served returns the first of versions the API server serves.
func served(disc Discovery, versions []schema.GroupVersionResource) (schema.GroupVersionResource, bool, error) {
	for _, gvr := range versions {
		list, err := discover(disc, gvr.GroupVersion().String())
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return gvr, false, fmt.Errorf("discover %s: %w", gvr.GroupVersion(), err)
		}
		for _, res := range list.APIResources {
			if res.Name == gvr.Resource {
				return gvr, true, nil
			}
		}
	}
	return schema.GroupVersionResource{}, false, nil
}

// discover asks which resources of gv are served, again on a failure that may pass.
func discover(disc Discovery, gv string) (list *metav1.APIResourceList, err error) {
	mayPass := func(err error) bool {
		return !apierrors.IsNotFound(err) && !apierrors.IsUnauthorized(err) && !apierrors.IsForbidden(err)
	}
	err = retry.OnError(discoveryBackoff, mayPass, func() error {
		list, err = disc.ServerResourcesForGroupVersion(gv)
		return err
	})
	return list, err
}

// trim keeps of an object only its identity, its deletion timestamp and the node it
// names: a cluster's Machines carry large specs and statuses that kubefence never reads.
func trim(obj any, nodePath []string) any {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj // a tombstone
	}
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetNamespace(u.GetNamespace())
	out.SetName(u.GetName())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	out.SetDeletionTimestamp(u.GetDeletionTimestamp())
	if n, _, _ := unstructured.NestedString(u.Object, nodePath...); n != "" {
		_ = unstructured.SetNestedField(out.Object, n, nodePath...) // a string into a fresh map cannot fail
	}
	return out
}

// Objects are the Machines and NodeMaintenances that say node is under maintenance.
func (r *Reader) Objects(node string) Objects {
	var o Objects
	if r == nil {
		return o
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, u := range byNode(r.machines, node) {
		if u.GetDeletionTimestamp() != nil {
			o.DeletingMachine = u.GetNamespace() + "/" + u.GetName()
			break
		}
	}
	if nms := byNode(r.maintenances, node); len(nms) > 0 {
		o.NodeMaintenance = nms[0].GetName()
	}
	return o
}

func byNode(idx cache.Indexer, node string) []*unstructured.Unstructured {
	if idx == nil {
		return nil
	}
	objs, err := idx.ByIndex(byNodeIndex, node)
	if err != nil {
		return nil // only for an index follow did not add
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	return out
}
