package orphans

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	fencinginformers "github.com/kubefence/kubefence/pkg/generated/informers/externalversions"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/podrelease"
)

// The repair's harness, as sample-controller's fixture: fake API servers, caches filled
// by hand (nothing runs in the background), a record made of what it was told, and a
// leader check whose answer the test sets.

// foreignTaint is a taint kubefence never owns: a repair must leave it on the node.
var foreignTaint = corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule}

type harness struct {
	t       *testing.T
	kube    *fake.Clientset
	fencing *fencingfake.Clientset
	nodes   cache.Indexer
	ncs     cache.Indexer
	rec     *record
	reg     *prometheus.Registry
	clock   *fixture.Clock
	// deposed is what the leader checks answer: nil while this replica leads.
	deposed error
	// checks counts the fresh Lease checks (Check) and the recent ones (Confirmed).
	checks, confirms int
	repair           *Repair
}

// newHarness is a repair over node-1..3 (node-1 with taints) and incidents, each both in
// its fake API server and in its cache, at fixture.T0 plus an hour.
func newHarness(t *testing.T, taints []corev1.Taint, incs ...*v1alpha1.NodeFence) *harness {
	t.Helper()
	objs := fixture.Nodes(3, fixture.T0)
	objs[0].(*corev1.Node).Spec.Taints = taints
	var nfs []runtime.Object
	for _, nf := range incs {
		nfs = append(nfs, nf)
	}
	h := &harness{t: t, kube: fixture.Cluster(0, objs...), fencing: fencingfake.NewSimpleClientset(nfs...),
		reg: prometheus.NewRegistry(), clock: fixture.NewClock(fixture.T0.Add(time.Hour))}
	nodeInf := informers.NewSharedInformerFactory(h.kube, 0).Core().V1().Nodes()
	nfInf := fencinginformers.NewSharedInformerFactory(h.fencing, 0).Fencing().V1alpha1().NodeFences().Informer()
	store, err := incidents.New(h.fencing.FencingV1alpha1().NodeFences(), nfInf)
	if err != nil {
		t.Fatal(err)
	}
	h.nodes, h.ncs = nodeInf.Informer().GetIndexer(), nfInf.GetIndexer()
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok {
			fixture.Must(h.t, h.nodes.Add(n))
		}
	}
	for _, nf := range incs {
		fixture.Must(h.t, h.ncs.Add(nf.DeepCopy()))
	}
	h.rec = &record{store: store, now: h.clock.Now}
	h.repair = New(Repair{Nodes: nodeInf.Lister(), Incidents: store, Releaser: &podrelease.Releaser{Client: h.kube}, Record: h.rec,
		Check:     func(context.Context) error { h.checks++; return h.deposed },
		Confirmed: func(context.Context) error { h.confirms++; return h.deposed }}, h.reg)
	h.fencing.ClearActions()
	return h
}

// once runs one round of the repair.
func (h *harness) once() { h.repair.Once(context.Background()) }

// expectRequests checks the API requests sent since last asked, the kube client's first.
func (h *harness) expectRequests(want ...string) {
	h.t.Helper()
	fixture.ExpectActions(h.t, want, &h.kube.Fake, &h.fencing.Fake)
}

// expectEvents checks the Events told to the record since last asked: each as
// "type reason on <object>", the incident's name or, for none, the node's.
func (h *harness) expectEvents(want ...string) {
	h.t.Helper()
	var got []string
	for _, e := range h.rec.take() {
		got = append(got, e.typ+" "+e.reason+" on "+e.on)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		h.t.Errorf("events %v, want %v", got, want)
	}
}

// nodeTaints are the keys of node's taints as the API server has them.
func (h *harness) nodeTaints(node string) []string {
	h.t.Helper()
	n := h.node(node)
	var keys []string
	for _, t := range n.Spec.Taints {
		keys = append(keys, t.Key)
	}
	return keys
}

// node is node as the API server has it.
func (h *harness) node(name string) *corev1.Node {
	h.t.Helper()
	n, err := h.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	h.kube.ClearActions()
	fixture.Must(h.t, err)
	return n
}

// setNode puts n in the API server and the cache, as a person's edit the watch brought.
func (h *harness) setNode(n *corev1.Node) {
	h.t.Helper()
	_, err := h.kube.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	h.kube.ClearActions()
	fixture.Must(h.t, err)
	fixture.Must(h.t, h.nodes.Update(n))
}

// incident is the named incident as the API server has it.
func (h *harness) incident(name string) *v1alpha1.NodeFence {
	nf, err := h.fencing.FencingV1alpha1().NodeFences().Get(context.Background(), name, metav1.GetOptions{})
	h.fencing.ClearActions()
	fixture.Must(h.t, err)
	return nf
}

// catchUp puts node and every incident in the caches as the API server has them, as
// the watches would by the next round.
func (h *harness) catchUp(node string) {
	h.t.Helper()
	fixture.Must(h.t, h.nodes.Update(h.node(node)))
	list, err := h.fencing.FencingV1alpha1().NodeFences().List(context.Background(), metav1.ListOptions{})
	fixture.Must(h.t, err)
	for i := range list.Items {
		fixture.Must(h.t, h.ncs.Update(&list.Items[i]))
	}
	h.fencing.ClearActions()
}

// counted is kubefence_orphans_total{outcome} as the registry exports it.
func (h *harness) counted(outcome string) float64 {
	h.t.Helper()
	families, err := h.reg.Gather()
	fixture.Must(h.t, err)
	for _, fam := range families {
		if fam.GetName() != "kubefence_orphans_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// series is how many series kubefence_orphans_total has.
func (h *harness) series() int {
	h.t.Helper()
	n, err := testutil.GatherAndCount(h.reg, "kubefence_orphans_total")
	fixture.Must(h.t, err)
	return n
}

// record is the incident record the repair writes through, made of what it was told:
// steps go on the incident's timeline, Events are kept in order, a save writes the
// status as the leader would.
type record struct {
	store  *incidents.Store
	now    func() time.Time
	events []event
}

type event struct{ typ, reason, message, on string }

func (r *record) Step(_ context.Context, nf *v1alpha1.NodeFence, typ, msg string) {
	incidents.AddStep(&nf.Status, r.now(), typ, msg)
}

func (r *record) Event(node *corev1.Node, nf *v1alpha1.NodeFence, typ, reason, format string, args ...any) {
	on := node.Name
	if nf != nil {
		on = nf.Name
	}
	r.events = append(r.events, event{typ: typ, reason: reason, message: fmt.Sprintf(format, args...), on: on})
}

func (r *record) Save(ctx context.Context, nf *v1alpha1.NodeFence) error {
	_, err := r.store.WriteStatus(ctx, nf, 0, "leader")
	return err
}

// take drains the Events told so far.
func (r *record) take() []event {
	out := r.events
	r.events = nil
	return out
}

// endedIncident is node's incident name, opened at opened and Recovered since, whose
// record lists taints as added by it.
func endedIncident(name, node string, opened time.Time, taints ...string) *v1alpha1.NodeFence {
	at := metav1.NewMicroTime(opened)
	return &v1alpha1.NodeFence{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
			Labels: map[string]string{v1alpha1.NodeLabel: node}, CreationTimestamp: metav1.NewTime(opened)},
		Spec: v1alpha1.NodeFenceSpec{NodeName: node, RequestedBy: v1alpha1.RequestedByController, Reason: "node unhealthy"},
		Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseRecovered, Policy: "default", BootID: "boot-" + node, Level: 1,
			Timeline:    []v1alpha1.Step{{Time: at, Type: v1alpha1.StepDetected, Message: "unhealthy"}},
			Remediation: v1alpha1.Remediation{TaintsAdded: taints}},
	}
}
