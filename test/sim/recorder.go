package sim

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// What the recorder sees happen, by kind.
const (
	SeenPodDeleted          = "PodDeleted"
	SeenPodDisruptionTarget = "PodDisruptionTarget"
	SeenPodRunning          = "PodRunning"
	SeenVADeleted           = "VolumeAttachmentDeleted"
	SeenTaintAdded          = "OutOfServiceTaintAdded"
	SeenTaintRemoved        = "OutOfServiceTaintRemoved"
	SeenIncidentPhase       = "IncidentPhase"
)

// Seen is one observation of the API server, timed on the observer's clock when the watch
// event arrived: never earlier than the change itself.
type Seen struct {
	At     time.Time
	Kind   string
	Node   string
	Object string
	Detail string
}

// Recorder watches the API server independently of the controller and keeps what
// happened to pods, volume attachments, node taints and incidents.
type Recorder struct {
	mu   sync.Mutex
	seen []Seen
	now  func() time.Time
	// incidents is the watch's cache of NodeFences.
	incidents cache.Store
}

// NewRecorder starts watching; it stops when ctx ends. It returns once its caches synced.
func NewRecorder(ctx context.Context, c *Cluster) (*Recorder, error) {
	r := &Recorder{now: time.Now}
	f := informers.NewSharedInformerFactory(c.Client, 0)
	dyn, err := dynamicClient(c)
	if err != nil {
		return nil, err
	}
	df := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	incidents := df.ForResource(v1alpha1.NodeFenceResource).Informer()
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandlerFuncs
	}{
		{f.Core().V1().Pods().Informer(), cache.ResourceEventHandlerFuncs{UpdateFunc: r.podUpdated, DeleteFunc: r.podDeleted}},
		{f.Storage().V1().VolumeAttachments().Informer(), cache.ResourceEventHandlerFuncs{DeleteFunc: r.vaDeleted}},
		{f.Core().V1().Nodes().Informer(), cache.ResourceEventHandlerFuncs{UpdateFunc: r.nodeUpdated}},
		{incidents, cache.ResourceEventHandlerFuncs{AddFunc: r.incident, UpdateFunc: func(_, o any) { r.incident(o) }}},
	}
	r.incidents = incidents.GetStore()
	for _, x := range handlers {
		if _, err := x.inf.AddEventHandler(x.h); err != nil {
			return nil, err
		}
	}
	f.Start(ctx.Done())
	df.Start(ctx.Done())
	for _, x := range handlers {
		if !cache.WaitForCacheSync(ctx.Done(), x.inf.HasSynced) {
			return nil, fmt.Errorf("recorder caches did not sync")
		}
	}
	return r, nil
}

func (r *Recorder) add(s Seen) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.At = r.now()
	r.seen = append(r.seen, s)
}

// All returns everything seen so far, in order.
func (r *Recorder) All() []Seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.seen)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// Incidents returns the NodeFences whose node's name starts with prefix, as the
// recorder's watch last saw them: reading them sends no request.
func (r *Recorder) Incidents(prefix string) ([]v1alpha1.NodeFence, error) {
	var out []v1alpha1.NodeFence
	for _, obj := range r.incidents.List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if node, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName"); !strings.HasPrefix(node, prefix) {
			continue
		}
		nf, err := decodeIncident(u)
		if err != nil {
			return nil, err
		}
		out = append(out, nf)
	}
	return out, nil
}

// First returns the first observation of kind about node, if any.
func (r *Recorder) First(kind, node string) (Seen, bool) {
	for _, s := range r.All() {
		if s.Kind == kind && (node == "" || s.Node == node) {
			return s, true
		}
	}
	return Seen{}, false
}

func unwrap(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

func (r *Recorder) podDeleted(obj any) {
	if p, ok := unwrap(obj).(*corev1.Pod); ok {
		r.add(Seen{Kind: SeenPodDeleted, Node: p.Spec.NodeName, Object: p.Namespace + "/" + p.Name, Detail: "uid " + string(p.UID)})
	}
}

func (r *Recorder) podUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Pod)
	p, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return
	}
	if !hasDisruptionTarget(old) && hasDisruptionTarget(p) {
		r.add(Seen{Kind: SeenPodDisruptionTarget, Node: p.Spec.NodeName, Object: p.Namespace + "/" + p.Name,
			Detail: fmt.Sprintf("uid %s, %s", p.UID, disruptionReason(p))})
	}
	if old.Status.Phase != corev1.PodRunning && p.Status.Phase == corev1.PodRunning {
		r.add(Seen{Kind: SeenPodRunning, Node: p.Spec.NodeName, Object: p.Namespace + "/" + p.Name})
	}
}

func disruptionReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

func hasDisruptionTarget(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue
	})
}

func (r *Recorder) vaDeleted(obj any) {
	if va, ok := unwrap(obj).(*storagev1.VolumeAttachment); ok {
		r.add(Seen{Kind: SeenVADeleted, Node: va.Spec.NodeName, Object: va.Name})
	}
}

const outOfServiceKey = "node.kubernetes.io/out-of-service"

func (r *Recorder) nodeUpdated(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Node)
	n, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	had, has := hasOutOfService(old), hasOutOfService(n)
	switch {
	case !had && has:
		r.add(Seen{Kind: SeenTaintAdded, Node: n.Name, Object: n.Name})
	case had && !has:
		r.add(Seen{Kind: SeenTaintRemoved, Node: n.Name, Object: n.Name})
	}
}

func hasOutOfService(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == outOfServiceKey })
}

func (r *Recorder) incident(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	node, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName")
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	if phase == "" {
		return // created; its first status write follows
	}
	r.mu.Lock()
	for i := len(r.seen) - 1; i >= 0; i-- {
		if s := r.seen[i]; s.Kind == SeenIncidentPhase && s.Object == u.GetName() {
			if s.Detail == phase {
				r.mu.Unlock()
				return
			}
			break
		}
	}
	r.mu.Unlock()
	r.add(Seen{Kind: SeenIncidentPhase, Node: node, Object: u.GetName(), Detail: phase})
}
