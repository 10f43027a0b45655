package maintenance

import (
	"context"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// discovery serves the resources listed per group version; any other is NotFound.
type discovery map[string][]string

func (d discovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	names, ok := d[gv]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: gv}, "")
	}
	list := &metav1.APIResourceList{GroupVersion: gv}
	for _, n := range names {
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: n})
	}
	return list, nil
}

func object(gvr schema.GroupVersionResource, kind, ns, name string, deleting bool, nodePath []string, node string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"big": "ignored"}}}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	if deleting {
		now := metav1.Now()
		u.SetDeletionTimestamp(&now)
		u.SetFinalizers([]string{"example.com/hold"})
	}
	_ = unstructured.SetNestedField(u.Object, node, nodePath...)
	return u
}

func TestReader(t *testing.T) {
	machines, nms := machineVersions[1], nodeMaintenanceVersions[0] // a Cluster API that serves only v1beta1
	scheme := runtime.NewScheme()
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{machines: "MachineList", nms: "NodeMaintenanceList", machineVersions[0]: "MachineList"},
		object(machines, "Machine", "capi", "m-1", true, machineNodePath, "node-1"),
		object(machines, "Machine", "capi", "m-2", false, machineNodePath, "node-2"),
		object(nms, "NodeMaintenance", "", "nm-3", false, nodeMaintenanceNodePath, "node-3"))
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	r, err := New(discovery{"cluster.x-k8s.io/v1beta1": {"machines", "machines/status"}, "nodemaintenance.medik8s.io/v1beta1": {"nodemaintenances"}}, factory)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	want := map[string]Objects{"node-1": {DeletingMachine: "capi/m-1"}, "node-2": {}, "node-3": {NodeMaintenance: "nm-3"}, "node-4": {}}
	for node, o := range want {
		if got := r.Objects(node); got != o {
			t.Errorf("Objects(%s) = %+v, want %+v", node, got, o)
		}
	}
	// The cache keeps only what Objects reads.
	cached, _, _ := r.machines.GetByKey("capi/m-1")
	if _, found, _ := unstructured.NestedMap(cached.(*unstructured.Unstructured).Object, "spec"); found {
		t.Errorf("the cached Machine keeps its spec: %v", cached)
	}
	// A NodeMaintenance made later is seen once the watch brings it.
	if _, err := client.Resource(nms).Create(ctx, object(nms, "NodeMaintenance", "", "nm-2", false, nodeMaintenanceNodePath, "node-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return r.Objects("node-2").NodeMaintenance == "nm-2", nil
	})
	if err != nil {
		t.Errorf("NodeMaintenance nm-2 never seen: %v", err)
	}
}

func TestReaderWithoutTheKinds(t *testing.T) {
	client := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	r, err := New(discovery{}, factory)
	if err != nil {
		t.Fatal(err)
	}
	if r.machines != nil || r.maintenances != nil {
		t.Errorf("kinds not served are followed: %+v", r)
	}
	if got := r.Objects("node-1"); got != (Objects{}) {
		t.Errorf("Objects = %+v, want none", got)
	}
	var none *Reader
	if got := none.Objects("node-1"); got != (Objects{}) {
		t.Errorf("a nil Reader's Objects = %+v", got)
	}
}

// TestReaderDiscoveryFails: discovery that keeps failing fails New, after its tries; a
// refusal fails it at once; a busy API server that answers on a later try does not.
func TestReaderDiscoveryFails(t *testing.T) {
	defer func(b wait.Backoff) { discoveryBackoff = b }(discoveryBackoff)
	discoveryBackoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 4}
	factory := func() dynamicinformer.DynamicSharedInformerFactory {
		return dynamicinformer.NewDynamicSharedInformerFactory(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), 0)
	}
	down := &failing{err: apierrors.NewServiceUnavailable("down")}
	if _, err := New(down, factory()); err == nil {
		t.Error("New succeeded although discovery failed")
	}
	if down.calls != 4 {
		t.Errorf("discovery asked %d times, want 4 (the backoff's steps)", down.calls)
	}
	refused := &failing{err: apierrors.NewForbidden(schema.GroupResource{}, "", nil)}
	if _, err := New(refused, factory()); err == nil || refused.calls != 1 {
		t.Errorf("a refused discovery: err %v after %d calls, want an error after 1", err, refused.calls)
	}
	busy := &failing{err: apierrors.NewTimeoutError("busy", 1), failures: 2,
		then: discovery{"cluster.x-k8s.io/v1beta2": {"machines"}}}
	r, err := New(busy, factory())
	if err != nil || r.machines == nil {
		t.Errorf("discovery that answers on its third try: err %v, Machines followed %t", err, r != nil && r.machines != nil)
	}
}

// failing fails its first failures calls with err (all, when failures is 0), then asks then.
type failing struct {
	err      error
	failures int
	then     discovery
	calls    int
}

func (f *failing) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	f.calls++
	if f.failures == 0 || f.calls <= f.failures {
		return nil, f.err
	}
	return f.then.ServerResourcesForGroupVersion(gv)
}

// TestReaderFollowsAKindInstalledLater: a NodeMaintenance CRD installed after the start
// is followed once Run finds it served, without a restart, and its objects hold nodes.
func TestReaderFollowsAKindInstalledLater(t *testing.T) {
	nms := nodeMaintenanceVersions[0]
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{nms: "NodeMaintenanceList", machineVersions[0]: "MachineList", machineVersions[1]: "MachineList"},
		object(nms, "NodeMaintenance", "", "nm-1", false, nodeMaintenanceNodePath, "node-1"))
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	served := &lateDiscovery{}
	r, err := New(served, factory)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	go r.Run(ctx, 10*time.Millisecond)
	if got := r.Objects("node-1"); got != (Objects{}) {
		t.Fatalf("Objects before the CRD = %+v, want none", got)
	}
	served.install("nodemaintenance.medik8s.io/v1beta1", "nodemaintenances")
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return r.Objects("node-1").NodeMaintenance == "nm-1", nil
	})
	if err != nil {
		t.Errorf("NodeMaintenance nm-1 never seen after its CRD was installed: %v", err)
	}
}

// lateDiscovery serves what install adds, from then on.
type lateDiscovery struct {
	mu sync.Mutex
	d  discovery
}

func (l *lateDiscovery) install(gv string, resources ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.d == nil {
		l.d = discovery{}
	}
	l.d[gv] = resources
}

func (l *lateDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.d.ServerResourcesForGroupVersion(gv)
}

// TestRead: a one-shot Reader holds what the API server held when it was read.
func TestRead(t *testing.T) {
	machines := machineVersions[0]
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{machines: "MachineList"},
		object(machines, "Machine", "capi", "m-1", true, machineNodePath, "node-1"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := Read(ctx, discovery{"cluster.x-k8s.io/v1beta2": {"machines"}}, client)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Objects("node-1"); got != (Objects{DeletingMachine: "capi/m-1"}) {
		t.Errorf("Objects(node-1) = %+v, want the Machine being deleted", got)
	}
}
