package caches

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/informers/coordination"
	"k8s.io/client-go/informers/core"
	kubeinternal "k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/informers/policy"
	"k8s.io/client-go/informers/storage"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	fencinginformers "github.com/kubefence/kubefence/pkg/generated/informers/externalversions"
	"github.com/kubefence/kubefence/pkg/generated/informers/externalversions/fencing"
	fencinginternal "github.com/kubefence/kubefence/pkg/generated/informers/externalversions/internalinterfaces"
)

// The factories below are client-go's and the generated ones, each of whose informers
// remembers the last error its list or watch met (a WatchErrorHandler, which can be set
// only before an informer starts, hence at its making). A factory keeps its informers to
// itself; a cache that does not sync would otherwise be reported by its Go type alone.
// Only the API groups kubefence reads go through the wrapper (Core, Coordination, Policy,
// Storage, Fencing); an informer of another group still starts and is waited for, and is
// reported without its error.

// lastError is one informer's name and the last error its list or watch met.
type lastError struct {
	name string
	mu   sync.Mutex
	err  error
}

func (l *lastError) set(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

func (l *lastError) get() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// tracker is a factory's informers by key (a Go type or a GroupVersionResource), each
// with its last error.
type tracker struct {
	// scope says which objects the factory watches: its namespace and selectors.
	scope string
	mu    sync.Mutex
	seen  map[any]*lastError
}

func newTracker(namespace string, tweak func(*metav1.ListOptions)) *tracker {
	parts := []string{"cluster-wide"}
	if namespace != metav1.NamespaceAll {
		parts[0] = "namespace " + namespace
	}
	if tweak != nil {
		var o metav1.ListOptions
		tweak(&o)
		if o.LabelSelector != "" {
			parts = append(parts, "labels "+o.LabelSelector)
		}
		if o.FieldSelector != "" {
			parts = append(parts, "fields "+o.FieldSelector)
		}
	}
	return &tracker{scope: strings.Join(parts, ", "), seen: map[any]*lastError{}}
}

// track names inf after what (its kind) and the factory's scope, and has it remember its
// errors; an informer already tracked, or already started, is left as it is.
func (t *tracker) track(key any, what string, inf cache.SharedIndexInformer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.seen[key]; ok {
		return
	}
	le := &lastError{name: fmt.Sprintf("%s (%s)", what, t.scope)}
	err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		le.set(err)
		cache.DefaultWatchErrorHandler(ctx, r, err) // the log line it replaces
	})
	if err == nil {
		t.seen[key] = le
	}
}

// unsyncedOf is what of synced (a factory's WaitForCacheSync) did not sync, with the last
// error of each; name names an informer the tracker never saw.
func unsyncedOf[K comparable](t *tracker, synced map[K]bool, name func(K) string) []Unsynced {
	var out []Unsynced
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, ok := range synced {
		if ok {
			continue
		}
		u := Unsynced{Informer: fmt.Sprintf("%s (%s)", name(key), t.scope)}
		if le := t.seen[key]; le != nil {
			u = Unsynced{Informer: le.name, LastError: le.get()}
		}
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Informer < out[j].Informer })
	return out
}

// kindOf is the kind of a typed informer's objects: *v1.ConfigMap's is ConfigMap.
func kindOf(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// waiter is a factory that Start starts and then waits for.
type waiter interface {
	Start(stop <-chan struct{})
	unsynced(ctx context.Context) []Unsynced
}

// kubeFactory is client-go's factory whose informers remember their errors.
type kubeFactory struct {
	informers.SharedInformerFactory
	namespace string
	tweak     kubeinternal.TweakListOptionsFunc
	*tracker
}

func newKubeFactory(client kubernetes.Interface, namespace string, tweak kubeinternal.TweakListOptionsFunc) *kubeFactory {
	opts := []informers.SharedInformerOption{informers.WithNamespace(namespace)}
	if tweak != nil {
		opts = append(opts, informers.WithTweakListOptions(tweak))
	}
	return &kubeFactory{SharedInformerFactory: informers.NewSharedInformerFactoryWithOptions(client, resync, opts...),
		namespace: namespace, tweak: tweak, tracker: newTracker(namespace, tweak)}
}

// InformerFor is the factory's, the informer tracked when it is made.
func (f *kubeFactory) InformerFor(obj runtime.Object, newFunc kubeinternal.NewInformerFunc) cache.SharedIndexInformer {
	return f.SharedInformerFactory.InformerFor(obj, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		inf := newFunc(c, resync)
		t := reflect.TypeOf(obj)
		f.track(t, kindOf(t), inf)
		return inf
	})
}

func (f *kubeFactory) Core() core.Interface { return core.New(f, f.namespace, f.tweak) }
func (f *kubeFactory) Coordination() coordination.Interface {
	return coordination.New(f, f.namespace, f.tweak)
}
func (f *kubeFactory) Policy() policy.Interface   { return policy.New(f, f.namespace, f.tweak) }
func (f *kubeFactory) Storage() storage.Interface { return storage.New(f, f.namespace, f.tweak) }

func (f *kubeFactory) unsynced(ctx context.Context) []Unsynced {
	return unsyncedOf(f.tracker, f.WaitForCacheSync(ctx.Done()), kindOf)
}

// fencingFactory is the generated factory of kubefence's kinds whose informers remember
// their errors.
type fencingFactory struct {
	fencinginformers.SharedInformerFactory
	*tracker
}

func newFencingFactory(client versioned.Interface) *fencingFactory {
	return &fencingFactory{SharedInformerFactory: fencinginformers.NewSharedInformerFactory(client, resync),
		tracker: newTracker(metav1.NamespaceAll, nil)}
}

// InformerFor is the factory's, the informer tracked when it is made.
func (f *fencingFactory) InformerFor(obj runtime.Object, newFunc fencinginternal.NewInformerFunc) cache.SharedIndexInformer {
	return f.SharedInformerFactory.InformerFor(obj, func(c versioned.Interface, resync time.Duration) cache.SharedIndexInformer {
		inf := newFunc(c, resync)
		t := reflect.TypeOf(obj)
		f.track(t, kindOf(t), inf)
		return inf
	})
}

func (f *fencingFactory) Fencing() fencing.Interface { return fencing.New(f, metav1.NamespaceAll, nil) }

func (f *fencingFactory) unsynced(ctx context.Context) []Unsynced {
	return unsyncedOf(f.tracker, f.WaitForCacheSync(ctx.Done()), kindOf)
}

// dynamicFactory is the dynamic factory whose informers remember their errors.
type dynamicFactory struct {
	dynamicinformer.DynamicSharedInformerFactory
	*tracker
}

// ForResource is the factory's, the informer tracked when first asked for.
func (f *dynamicFactory) ForResource(gvr schema.GroupVersionResource) informers.GenericInformer {
	gi := f.DynamicSharedInformerFactory.ForResource(gvr)
	f.track(gvr, gvrName(gvr), gi.Informer())
	return gi
}

func (f *dynamicFactory) unsynced(ctx context.Context) []Unsynced {
	return unsyncedOf(f.tracker, f.WaitForCacheSync(ctx.Done()), gvrName)
}

// gvrName names an optional kind's informer: machines.cluster.x-k8s.io/v1beta2.
func gvrName(gvr schema.GroupVersionResource) string {
	return gvr.GroupResource().String() + "/" + gvr.Version
}
