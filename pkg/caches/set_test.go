package caches

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/detector"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/nodeagent"
)

// newSet is the set over kube and an empty fencing API server, without a dynamic client.
func newSet(t *testing.T, kube *fake.Clientset) *Set {
	t.Helper()
	set, err := New(kube, fencingfake.NewSimpleClientset(), nil, "kubefence-system", "kubefence-agents", "kubefence-pause")
	fixture.Must(t, err)
	return set
}

// start starts set and waits for its caches, failing the test after testDeadline.
func start(t *testing.T, set *Set) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	fixture.Must(t, set.StartWithin(ctx, testDeadline))
}

// TestPodsOn: the set's pod cache is indexed by node; a pod not bound yet is on none.
func TestPodsOn(t *testing.T) {
	set := newSet(t, fake.NewClientset())
	pods := set.Kube.Core().V1().Pods().Informer()
	for name, node := range map[string]string{"web-0": "node-1", "web-1": "node-1", "db-0": "node-2", "pending": ""} {
		fixture.Must(t, pods.GetIndexer().Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.PodSpec{NodeName: node}}))
	}
	for node, want := range map[string][]string{"node-1": {"web-0", "web-1"}, "node-2": {"db-0"}, "node-3": nil, "": nil} {
		var got []string
		for _, p := range PodsOn(pods, node) {
			got = append(got, p.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("pods on %q: %v, want %v", node, got, want)
		}
	}
	unindexed := cache.NewSharedIndexInformer(nil, &corev1.Pod{}, 0, cache.Indexers{})
	if got := PodsOn(unindexed, "node-1"); got != nil {
		t.Errorf("pods of an informer New did not index: %v, want nil", got)
	}
}

// TestUrgentPDBs: only the budgets that allow no disruption now can make a node urgent.
func TestUrgentPDBs(t *testing.T) {
	set := newSet(t, fake.NewClientset())
	pdbs := set.Kube.Policy().V1().PodDisruptionBudgets()
	for name, allowed := range map[string]int32{"none-left": 0, "one-left": 1, "overdrawn": -1} {
		fixture.Must(t, pdbs.Informer().GetIndexer().Add(&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}))
	}
	var got []string
	for _, pdb := range UrgentPDBs(pdbs.Lister()) {
		got = append(got, pdb.Name)
	}
	slices.Sort(got)
	if want := []string{"none-left", "overdrawn"}; !slices.Equal(got, want) {
		t.Errorf("urgent budgets %v, want %v", got, want)
	}
}

// TestAttachmentsOn counts a node's VolumeAttachments in the set's cache.
func TestAttachmentsOn(t *testing.T) {
	set := newSet(t, fake.NewClientset())
	vas := set.Kube.Storage().V1().VolumeAttachments()
	for name, node := range map[string]string{"va-1": "node-1", "va-2": "node-1", "va-3": "node-2"} {
		fixture.Must(t, vas.Informer().GetIndexer().Add(&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagev1.VolumeAttachmentSpec{NodeName: node}}))
	}
	for node, want := range map[string]int{"node-1": 2, "node-2": 1, "node-3": 0} {
		if got := AttachmentsOn(vas.Lister(), node); got != want {
			t.Errorf("attachments on %s: %d, want %d", node, got, want)
		}
	}
}

// TestNewTrimsWhatIsNeverRead: the caches of nodes and pods hold no managed fields and
// no node images, which kubefence never reads and which are most of a node's size.
func TestNewTrimsWhatIsNeverRead(t *testing.T) {
	node := fixture.Node("node-1", "boot-1", true)
	node.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	node.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1 << 30}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.PodSpec{NodeName: "node-1"}}
	set := newSet(t, fake.NewClientset(node, pod))
	nodes, pods := set.Kube.Core().V1().Nodes(), set.Kube.Core().V1().Pods()
	nodes.Informer()
	pods.Informer()
	start(t, set)
	n, err := nodes.Lister().Get("node-1")
	fixture.Must(t, err)
	if len(n.ManagedFields) != 0 || len(n.Status.Images) != 0 {
		t.Errorf("cached node keeps %d managed fields and %d images, want none", len(n.ManagedFields), len(n.Status.Images))
	}
	if n.Status.NodeInfo.BootID != "boot-1" {
		t.Errorf("cached node lost its boot ID: %q", n.Status.NodeInfo.BootID)
	}
	if got := PodsOn(pods.Informer(), "node-1"); len(got) != 1 || len(got[0].ManagedFields) != 0 {
		t.Errorf("cached pods on node-1 %+v, want web-0 without managed fields", got)
	}
}

// TestNewWatchesEachScope: each factory lists only what it is for: nodes and pods
// cluster-wide, the kubelets' Leases in kube-node-lease, the replicas' identity Leases and the pause ConfigMap by name in the
// controller's namespace, the node agents' reports by label in theirs.
func TestNewWatchesEachScope(t *testing.T) {
	kube := fake.NewClientset()
	set := newSet(t, kube)
	set.NodeLeases.Coordination().V1().Leases().Informer()
	set.Identities.Coordination().V1().Leases().Informer()
	set.Pauses.Core().V1().ConfigMaps().Informer()
	set.Reports.Coordination().V1().Leases().Informer()
	start(t, set)
	var got []string
	for _, a := range kube.Actions() {
		l, ok := a.(k8stesting.ListAction)
		if !ok {
			continue
		}
		r := l.GetListRestrictions()
		got = append(got, strings.Join([]string{a.GetResource().Resource, a.GetNamespace(), r.Labels.String(), r.Fields.String()}, " | "))
	}
	slices.Sort(got)
	want := []string{
		"configmaps | kubefence-system |  | metadata.name=kubefence-pause",
		"leases | " + detector.LeaseNamespace + " |  | ",
		"leases | kubefence-agents | " + nodeagent.ComponentLabel + "=" + nodeagent.Component + " | ",
		"leases | kubefence-system | " + leader.ComponentLabel + "=controller," + leader.IdentityLabel + "=true | ",
		"nodes |  |  | ", // cluster-wide, made by New to be trimmed
		"pods |  |  | ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("lists:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// TestUnsyncedSays: an unsynced cache says what it watched and why it did not sync, and
// points at a missing CustomResourceDefinition when the API server does not serve the
// kind.
func TestUnsyncedSays(t *testing.T) {
	noMatch := &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "cluster.x-k8s.io", Kind: "Machine"}}
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"slow":      {nil, "Node (cluster-wide): no list or watch error seen"},
		"not found": {apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, ""), "is its CustomResourceDefinition installed?"},
		"no match":  {noMatch, "is its CustomResourceDefinition installed?"},
		"other":     {errors.New("connection refused"), "Node (cluster-wide): connection refused"},
	} {
		if got := (Unsynced{Informer: "Node (cluster-wide)", LastError: tc.err}).String(); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want it to say %q", name, got, tc.want)
		}
	}
}

// TestSyncErrorSays names every cache that did not sync, and whether time ran out or the
// start was cancelled.
func TestSyncErrorSays(t *testing.T) {
	unsynced := []Unsynced{{Informer: "Node (cluster-wide)"}, {Informer: "Lease (namespace kube-node-lease)", LastError: errors.New("forbidden")}}
	for within, want := range map[time.Duration]string{
		time.Second: "informer caches did not sync within 1s: Node (cluster-wide): no list or watch error seen; Lease (namespace kube-node-lease): forbidden",
		0:           "informer caches did not sync before the start was cancelled: ",
	} {
		if got := (&SyncError{Within: within, Unsynced: unsynced}).Error(); !strings.HasPrefix(got, want) {
			t.Errorf("within %s: %q, want %q", within, got, want)
		}
	}
}

// TestStartCancelled: a start cancelled before its caches synced says so, and names them.
func TestStartCancelled(t *testing.T) {
	kube := fake.NewClientset()
	refuse(&kube.Fake, "nodes", errors.New("connection refused"))
	set := newSet(t, kube)
	set.Kube.Core().V1().Nodes().Informer()
	ctx, cancel := context.WithTimeout(context.Background(), syncTimeout)
	defer cancel()
	err := set.Start(ctx)
	var se *SyncError
	if !errors.As(err, &se) || se.Within != 0 || len(se.Unsynced) != 1 || !strings.HasPrefix(se.Unsynced[0].Informer, "Node (cluster-wide)") {
		t.Errorf("start = %#v, want a *SyncError of the node cache, cancelled", err)
	}
}

// TestTrackerScope: a factory's scope is its namespace and selectors, as an unsynced
// cache names it.
func TestTrackerScope(t *testing.T) {
	for want, tc := range map[string]struct {
		ns    string
		tweak func(*metav1.ListOptions)
	}{
		"cluster-wide":            {metav1.NamespaceAll, nil},
		"namespace a":             {"a", func(*metav1.ListOptions) {}},
		"namespace a, labels x=y": {"a", func(o *metav1.ListOptions) { o.LabelSelector = "x=y" }},
		"cluster-wide, labels x=y, fields metadata.name=z": {metav1.NamespaceAll, func(o *metav1.ListOptions) {
			o.LabelSelector, o.FieldSelector = "x=y", "metadata.name=z"
		}},
	} {
		if got := newTracker(tc.ns, tc.tweak).scope; got != want {
			t.Errorf("scope %q, want %q", got, want)
		}
	}
}

// TestDynamicInformerNamed: an optional kind's cache that does not sync is named by its
// resource and version, with the error its list met.
func TestDynamicInformerNamed(t *testing.T) {
	gvr := fixture.MachinesV1beta2
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "MachineList"})
	refuse(&dyn.Fake, "machines", errors.New("the server could not find the requested resource"))
	set, err := New(fake.NewClientset(), fencingfake.NewSimpleClientset(), dyn, "kubefence-system", "kubefence-system", "kubefence-pause")
	fixture.Must(t, err)
	set.Dynamic.ForResource(gvr)
	set.Dynamic.ForResource(gvr) // asked twice, tracked once
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	err = set.StartWithin(ctx, syncTimeout)
	var se *SyncError
	if !errors.As(err, &se) || len(se.Unsynced) != 1 || se.Unsynced[0].Informer != "machines.cluster.x-k8s.io/v1beta2 (cluster-wide)" ||
		se.Unsynced[0].LastError == nil {
		t.Errorf("start = %v, want the Machines cache named, with its error", err)
	}
}

// TestKindOf names a typed informer's kind by its Go type, pointer or not.
func TestKindOf(t *testing.T) {
	for _, obj := range []any{&coordinationv1.Lease{}, coordinationv1.Lease{}} {
		if got := kindOf(reflect.TypeOf(obj)); got != "Lease" {
			t.Errorf("kind of %T: %q, want Lease", obj, got)
		}
	}
}

// TestUnsyncedOf: what did not sync comes sorted by name; a tracked informer carries its
// own name and last error, one the tracker never saw is named by its key in the scope,
// and what synced is left out.
func TestUnsyncedOf(t *testing.T) {
	tr := newTracker("a", nil)
	inf := cache.NewSharedIndexInformer(nil, &corev1.Node{}, 0, cache.Indexers{})
	tr.track("nodes", "Node", inf)
	tr.track("nodes", "Other", inf) // tracked once: the first name stays
	tr.seen["nodes"].set(errors.New("forbidden"))
	got := unsyncedOf(tr, map[string]bool{"pods": false, "nodes": false, "leases": true}, func(k string) string { return "kind " + k })
	want := []Unsynced{{Informer: "Node (namespace a)", LastError: errors.New("forbidden")}, {Informer: "kind pods (namespace a)"}}
	if len(got) != len(want) {
		t.Fatalf("unsynced %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i].String() {
			t.Errorf("unsynced[%d] = %q, want %q", i, got[i], want[i])
		}
	}
}
