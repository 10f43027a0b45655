package controller

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// NodeLabel marks each NodeFence with the node it is about, for selection.
const NodeLabel = "fencing.kubefence.io/node"

// ErrStaleEpoch means a leader with a newer fencing epoch has written the incident: this
// replica has been deposed and must stop at once.
var ErrStaleEpoch = errors.New("incident written by a newer leader epoch")

// store reads NodeFences from the informer cache and writes them to the API server.
type store struct {
	client  dynamic.NamespaceableResourceInterface
	indexer cache.Indexer
}

const byNodeIndex = "byNode"

func nodeFenceIndexers() cache.Indexers {
	return cache.Indexers{byNodeIndex: func(obj any) ([]string, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil, nil
		}
		name, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName")
		return []string{name}, nil
	}}
}

func fromUnstructured(obj any) (*v1alpha1.NodeFence, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T in NodeFence cache", obj)
	}
	nf := &v1alpha1.NodeFence{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, nf); err != nil {
		return nil, fmt.Errorf("decode NodeFence %s: %w", u.GetName(), err)
	}
	return nf, nil
}

func toUnstructured(nf *v1alpha1.NodeFence) (*unstructured.Unstructured, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(nf)
	if err != nil {
		return nil, fmt.Errorf("encode NodeFence %s: %w", nf.Name, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
	u.SetKind("NodeFence")
	return u, nil
}

// forNode returns every cached NodeFence of a node.
func (s *store) forNode(node string) ([]*v1alpha1.NodeFence, error) {
	objs, err := s.indexer.ByIndex(byNodeIndex, node)
	if err != nil {
		return nil, err
	}
	out := make([]*v1alpha1.NodeFence, 0, len(objs))
	for _, o := range objs {
		nf, err := fromUnstructured(o)
		if err != nil {
			return nil, err
		}
		out = append(out, nf)
	}
	return out, nil
}

// openLive lists the node's open incidents from the API server itself, so that a cache
// that has not yet seen a fresh incident cannot lead to a second one (invariant 3). It
// lists them all: a person's request carries no label.
func (s *store) openLive(ctx context.Context, node string) ([]*v1alpha1.NodeFence, error) {
	list, err := s.client.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list incidents of node %s: %w", node, err)
	}
	var out []*v1alpha1.NodeFence
	for i := range list.Items {
		nf, err := fromUnstructured(&list.Items[i])
		if err != nil {
			return nil, err
		}
		if nf.Spec.NodeName == node && nf.Status.Phase.Open() {
			out = append(out, nf)
		}
	}
	return out, nil
}

// create creates the incident and writes its initial status.
func (s *store) create(ctx context.Context, nf *v1alpha1.NodeFence, epoch int64, leader string) (*v1alpha1.NodeFence, error) {
	u, err := toUnstructured(nf)
	if err != nil {
		return nil, err
	}
	created, err := s.client.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create incident for node %s: %w", nf.Spec.NodeName, err)
	}
	out, err := fromUnstructured(created)
	if err != nil {
		return nil, err
	}
	out.Status = nf.Status
	return s.writeStatus(ctx, out, epoch, leader)
}

// writeStatus writes nf's status if the stored object still has nf's resourceVersion
// and no newer epoch has written it.
func (s *store) writeStatus(ctx context.Context, nf *v1alpha1.NodeFence, epoch int64, leader string) (*v1alpha1.NodeFence, error) {
	if nf.Status.Epoch > epoch {
		return nil, fmt.Errorf("write incident %s at epoch %d, stored epoch is %d: %w", nf.Name, epoch, nf.Status.Epoch, ErrStaleEpoch)
	}
	nf.Status.Epoch, nf.Status.Leader = epoch, leader
	u, err := toUnstructured(nf)
	if err != nil {
		return nil, err
	}
	updated, err := s.client.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		// Someone wrote in between: find out whether it was a newer leader.
		if cur, gerr := s.client.Get(ctx, nf.Name, metav1.GetOptions{}); gerr == nil {
			if stored, derr := fromUnstructured(cur); derr == nil && stored.Status.Epoch > epoch {
				return nil, fmt.Errorf("write incident %s at epoch %d, stored epoch is %d: %w", nf.Name, epoch, stored.Status.Epoch, ErrStaleEpoch)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("write incident %s: %w", nf.Name, err)
	}
	return fromUnstructured(updated)
}
