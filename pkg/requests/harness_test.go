package requests

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	fencinginformers "github.com/kubefence/kubefence/pkg/generated/informers/externalversions"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
)

// The requests' harness, as sample-controller's fixture: a fake API server of
// KubefenceRemediations, caches of node-1..3 and of the requests filled by hand (nothing
// runs in the background), Cluster API Machines served by a fake dynamic client, and the
// incident record as a map the test fills, standing for the incident loop.

type harness struct {
	t       *testing.T
	fencing *fencingfake.Clientset
	cached  cache.Indexer
	inc     *fakeIncidents
	// factory makes the requests' informer; tests of the watch start it.
	factory fencinginformers.SharedInformerFactory
	mu      sync.Mutex
	// enqueued are the nodes whose sync the requests asked for, in order.
	enqueued []string
	// deposed is what the leader check answers: nil while this replica leads.
	deposed error
	r       *Requests
}

// harnessOptions change what newHarness makes.
type harnessOptions struct {
	// selector, when set, is the one policy's node selector.
	selector map[string]string
	// machines are the Cluster API Machines served.
	machines []runtime.Object
	// noMachines leaves the requests without a client of Machines.
	noMachines bool
}

// newHarness is the requests over node-1..3 and the requests krs, each both in the fake
// API server and in the cache.
func newHarness(t *testing.T, o harnessOptions, krs ...*v1alpha1.KubefenceRemediation) *harness {
	t.Helper()
	var objs []runtime.Object
	for _, kr := range krs {
		objs = append(objs, kr)
	}
	h := &harness{t: t, fencing: fencingfake.NewSimpleClientset(objs...), inc: &fakeIncidents{byName: map[string]*v1alpha1.NodeFence{}}}
	nodes := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().Nodes()
	for _, obj := range fixture.Nodes(3, fixture.T0) {
		if n, ok := obj.(*corev1.Node); ok {
			fixture.Must(h.t, nodes.Informer().GetIndexer().Add(n))
		}
	}
	h.factory = fencinginformers.NewSharedInformerFactory(h.fencing, 0)
	inf := h.factory.Fencing().V1alpha1().KubefenceRemediations()
	h.cached = inf.Informer().GetIndexer()
	pols := []v1alpha1.Policy{{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{"ipmi"}}}}}
	if o.selector != nil {
		pols[0].NodeSelector = &metav1.LabelSelector{MatchLabels: o.selector}
	}
	opts := Options{Informer: inf, Fencing: h.fencing, Nodes: nodes.Lister(), Policies: pols, Incidents: h.inc,
		Queue:   enqueueFunc(func(node string) { h.mu.Lock(); defer h.mu.Unlock(); h.enqueued = append(h.enqueued, node) }),
		Confirm: func(context.Context) error { return h.deposed }}
	if !o.noMachines {
		opts.Machines = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{fixture.MachinesV1beta2: "MachineList"}, o.machines...)
	}
	r, err := New(opts)
	fixture.Must(h.t, err)
	h.r = r
	t.Cleanup(r.queue.ShutDown)
	for _, kr := range krs {
		fixture.Must(h.t, h.cached.Add(kr.DeepCopy()))
	}
	h.fencing.ClearActions()
	return h
}

// sync runs one sync of the request with key.
func (h *harness) sync(key string) time.Duration {
	h.t.Helper()
	d, err := h.r.Sync(context.Background(), key)
	fixture.Must(h.t, err)
	return d
}

// request reads a request back from the fake API server and caches it, as its watch
// would.
func (h *harness) request(ns, name string) *v1alpha1.KubefenceRemediation {
	h.t.Helper()
	kr, err := h.fencing.FencingV1alpha1().KubefenceRemediations(ns).Get(context.Background(), name, metav1.GetOptions{})
	fixture.Must(h.t, err)
	h.fencing.ClearActions()
	fixture.Must(h.t, h.cached.Update(kr))
	return kr
}

// expectRequests checks the API requests sent since last asked.
func (h *harness) expectRequests(want ...string) {
	h.t.Helper()
	fixture.ExpectActions(h.t, want, &h.fencing.Fake)
}

// expectEnqueued checks the nodes whose sync was asked for since last asked.
func (h *harness) expectEnqueued(want ...string) {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Equal(h.enqueued, want) {
		h.t.Errorf("node syncs asked for %v, want %v", h.enqueued, want)
	}
	h.enqueued = nil
}

// queued drains the requests' queue, as Run's workers would, and returns the keys.
func (h *harness) queued() []string {
	var keys []string
	for h.r.queue.Len() > 0 {
		key, _ := h.r.queue.Get()
		h.r.queue.Done(key)
		h.r.queue.Forget(key)
		keys = append(keys, key)
	}
	slices.Sort(keys)
	return keys
}

// fakeIncidents is the incident record as the incident loop keeps it, filled by the test.
type fakeIncidents struct {
	byName map[string]*v1alpha1.NodeFence
}

func (f *fakeIncidents) Get(name string) *v1alpha1.NodeFence { return f.byName[name] }

func (f *fakeIncidents) Open(node string) (*v1alpha1.NodeFence, error) {
	var open *v1alpha1.NodeFence
	for _, nf := range f.byName {
		if nf.Spec.NodeName == node && nf.Status.Phase.Open() && (open == nil || nf.CreationTimestamp.Before(&open.CreationTimestamp)) {
			open = nf
		}
	}
	return open, nil
}

// add puts nf in the record.
func (f *fakeIncidents) add(nf *v1alpha1.NodeFence) { f.byName[nf.Name] = nf }

// incident is node-1's incident name in phase, opened at fixture.T0 by the controller.
func incident(name string, phase v1alpha1.Phase) *v1alpha1.NodeFence {
	return &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(fixture.T0)},
		Spec:   v1alpha1.NodeFenceSpec{NodeName: "node-1", RequestedBy: v1alpha1.RequestedByController, Reason: "node unhealthy"},
		Status: v1alpha1.NodeFenceStatus{Phase: phase}}
}

// enqueueFunc is a Queue that calls itself.
type enqueueFunc func(node string)

func (f enqueueFunc) Add(node string) { f(node) }
