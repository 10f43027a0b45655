package incidents

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	fencinginformers "github.com/kubefence/kubefence/pkg/generated/informers/externalversions"
	"github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/leader"
)

// pruneHarness is a retention over incidents, each both in a fake API server and in the
// store's cache, with KeepPerNode keep, confirmed as leader while deposed is nil.
type pruneHarness struct {
	client  *fencingfake.Clientset
	r       *Retention
	deposed error
}

func newPruneHarness(t *testing.T, keep int32, now time.Time, incs ...*v1alpha1.NodeFence) *pruneHarness {
	t.Helper()
	var objs []runtime.Object
	for _, nf := range incs {
		objs = append(objs, nf)
	}
	h := &pruneHarness{client: fencingfake.NewSimpleClientset(objs...)}
	inf := fencinginformers.NewSharedInformerFactory(h.client, 0).Fencing().V1alpha1().NodeFences().Informer()
	store, err := New(h.client.FencingV1alpha1().NodeFences(), inf)
	if err != nil {
		t.Fatal(err)
	}
	for _, nf := range incs {
		if err := inf.GetIndexer().Add(nf.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &v1alpha1.Config{}
	cfg.Default()
	cfg.History.KeepPerNode = keep
	h.r = &Retention{Store: store, History: cfg.History, Now: func() time.Time { return now },
		Confirm: func(context.Context) error { return h.deposed }}
	return h
}

// left are the names of the incidents the API server still has, sorted.
func (h *pruneHarness) left(t *testing.T) []string {
	t.Helper()
	list, err := h.client.FencingV1alpha1().NodeFences().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, nf := range list.Items {
		out = append(out, nf.Name)
	}
	slices.Sort(out)
	return out
}

// ended is node-1's incident name, opened at opened and Recovered since.
func ended(name string, opened time.Time) *v1alpha1.NodeFence {
	return &v1alpha1.NodeFence{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
			Labels: map[string]string{v1alpha1.NodeLabel: "node-1"}, CreationTimestamp: metav1.NewTime(opened)},
		Spec: v1alpha1.NodeFenceSpec{NodeName: "node-1", RequestedBy: v1alpha1.RequestedByController},
		Status: v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhaseRecovered,
			Timeline: []v1alpha1.Step{{Time: metav1.NewMicroTime(opened), Type: v1alpha1.StepDetected}}},
	}
}

// TestPruneHistory: retention deletes the ended incidents beyond the newest KeepPerNode
// of a node, each with its UID and resourceVersion as preconditions, so an incident
// changed (or replaced by a namesake) since the cache read is never deleted on a stale
// view. Open incidents stay whatever their age.
func TestPruneHistory(t *testing.T) {
	t0 := fixture.T0
	var incs []*v1alpha1.NodeFence
	for i, name := range []string{"node-1-a", "node-1-b", "node-1-c"} {
		nf := ended(name, t0.Add(time.Duration(i)*time.Hour))
		nf.ResourceVersion = "7"
		incs = append(incs, nf)
	}
	open := ended("node-1-x0", t0) // opened before them all
	open.Status.Phase = v1alpha1.PhaseRemediated
	h := newPruneHarness(t, 2, t0.Add(3*time.Hour), append(incs, open)...)
	h.r.Prune(context.Background())
	actions := h.client.Actions()
	if got := fixture.Actions(&h.client.Fake); !slices.Equal(got, []string{"delete nodefences node-1-a"}) {
		t.Fatalf("API requests %v, want the delete of node-1-a alone", got)
	}
	pre := actions[0].(k8stesting.DeleteAction).GetDeleteOptions().Preconditions
	if pre == nil || pre.UID == nil || *pre.UID != "uid-node-1-a" || pre.ResourceVersion == nil || *pre.ResourceVersion != "7" {
		t.Errorf("delete preconditions %+v, want the cached UID and resourceVersion", pre)
	}
	if left, want := h.left(t), []string{"node-1-b", "node-1-c", "node-1-x0"}; !slices.Equal(left, want) {
		t.Errorf("incidents left %v, want %v", left, want)
	}
}

// TestPruneHistoryGoesOnPastFailures: an incident the API server will not delete (a
// timeout, or a conflict with a newer write) neither stops the round nor fails it: the
// older history is still pruned, newest first, and the refused one stays for the next
// round.
func TestPruneHistoryGoesOnPastFailures(t *testing.T) {
	t0 := fixture.T0
	var incs []*v1alpha1.NodeFence
	for i, name := range []string{"node-1-old", "node-1-conflict", "node-1-timeout", "node-1-new"} {
		incs = append(incs, ended(name, t0.Add(time.Duration(i)*time.Hour)))
	}
	h := newPruneHarness(t, 1, t0.Add(4*time.Hour), incs...)
	refuse := map[string]error{
		"node-1-timeout":  apierrors.NewInternalError(errors.New("etcdserver: request timed out")),
		"node-1-conflict": apierrors.NewConflict(v1alpha1.Resource("nodefences"), "node-1-conflict", errors.New("precondition failed")),
	}
	h.client.PrependReactor("delete", "nodefences", func(a k8stesting.Action) (bool, runtime.Object, error) {
		err, ok := refuse[a.(k8stesting.DeleteAction).GetName()]
		return ok, nil, err
	})
	h.r.Prune(context.Background())
	fixture.ExpectActions(t, []string{"delete nodefences node-1-timeout", "delete nodefences node-1-conflict", "delete nodefences node-1-old"},
		&h.client.Fake)
	for name, kept := range map[string]bool{"node-1-new": true, "node-1-timeout": true, "node-1-old": false} {
		_, err := h.client.FencingV1alpha1().NodeFences().Get(context.Background(), name, metav1.GetOptions{})
		if kept != (err == nil) {
			t.Errorf("%s after the round: %v, want kept %v", name, err, kept)
		}
	}
}

// TestPruneNeedsTheLease (invariant 2): while the leader check fails nothing is deleted,
// however old the history; the next round tries again.
func TestPruneNeedsTheLease(t *testing.T) {
	t0 := fixture.T0
	h := newPruneHarness(t, 1, t0, ended("node-1-old", t0.Add(-365*24*time.Hour)), ended("node-1-new", t0.Add(-time.Minute)))
	h.deposed = leader.ErrStaleEpoch
	h.r.Prune(context.Background())
	fixture.ExpectActions(t, nil, &h.client.Fake)
	if left, want := h.left(t), []string{"node-1-new", "node-1-old"}; !slices.Equal(left, want) {
		t.Errorf("incidents left %v, want %v", left, want)
	}
	h.deposed = nil
	h.r.Prune(context.Background())
	if left, want := h.left(t), []string{"node-1-new"}; !slices.Equal(left, want) {
		t.Errorf("incidents left once confirmed %v, want %v", left, want)
	}
}
