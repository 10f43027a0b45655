package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/orphans"
	"github.com/kubefence/kubefence/pkg/podrelease"
)

// The incident loop's part in the leader's housekeeping (pkg/orphans' repair, pkg/incidents'
// retention): the Lease check it lends them, which stops a deposed replica and tells main,
// and the record the repair writes through (steps, Events held for the save, the save at
// this replica's epoch). What the housekeepers decide is tested beside their code.

// endedIncident is node's incident name, opened at opened and Recovered since, whose
// record lists taints as added by it.
func endedIncident(name, node string, opened time.Time, taints ...string) *v1alpha1.NodeFence {
	nf := fencedIncident(v1alpha1.PhaseRecovered, v1alpha1.AttemptVerified)
	nf.Name, nf.UID, nf.CreationTimestamp = name, types.UID("uid-"+name), metav1.NewTime(opened)
	nf.Spec.NodeName, nf.Labels[v1alpha1.NodeLabel] = node, node
	nf.Status.Timeline[0].Time = metav1.NewMicroTime(opened)
	nf.Status.Remediation.TaintsAdded = taints
	return nf
}

// taintedNodes are threeNodes with node-1 carrying taints.
func taintedNodes(taints ...corev1.Taint) []runtime.Object {
	objs := threeNodes()
	objs[0].(*corev1.Node).Spec.Taints = taints
	return objs
}

// nodeTaints are the keys of node's taints as the API server has them.
func (f *fixture) nodeTaints(node string) []string {
	f.t.Helper()
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	f.kube.ClearActions()
	if err != nil {
		f.t.Fatal(err)
	}
	var keys []string
	for _, t := range n.Spec.Taints {
		keys = append(keys, t.Key)
	}
	return keys
}

// catchUp puts node and every incident in the caches as the API server has them, as
// the watches would by the next round.
func (f *fixture) catchUp(node string) {
	f.t.Helper()
	ctx := context.Background()
	n, err := f.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.cache(n)
	list, err := f.dyn.FencingV1alpha1().NodeFences().List(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for i := range list.Items {
		if err := nfIndexer(f.c).Update(&list.Items[i]); err != nil {
			f.t.Fatal(err)
		}
	}
	f.requests()
}

// depose hands the leader Lease to another replica and makes the controller check it
// before every write, as it does with leader election on. It returns what OnDeposed is
// told.
func (f *fixture) depose() *error {
	f.t.Helper()
	le := f.c.cfg.LeaderElection
	other := "other-replica"
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: le.Name, Namespace: le.Namespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &other}}
	if _, err := f.kube.CoordinationV1().Leases(le.Namespace).Create(context.Background(), lease, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.kube.ClearActions()
	return f.checkLease(&leader.LeaseGuard{Client: f.kube, Config: le, Identity: "me"}, f.c.lead.guard.Epoch())
}

// checkLease has the loop check lease at epoch, as pkg/app's guard does with leader
// election on; it returns what the guard's OnDeposed is told.
func (f *fixture) checkLease(lease *leader.LeaseGuard, epoch int64) *error {
	deposed := new(error)
	g := leader.NewGuard(lease, func() time.Time { return f.clock.Now() }, func(err error) { *deposed = err })
	g.Lead(epoch)
	f.c.lead.guard, f.c.record.Guard = g, g
	return deposed
}

// TestOrphanRepairRecordedByTheLoop: the orphan repair records through the Recorder the
// loop shares: its step goes on the closed incident's timeline, its Event waits for
// the save, and the save is the loop's, at this replica's epoch and name.
func TestOrphanRepairRecordedByTheLoop(t *testing.T) {
	nf := endedIncident("node-1-x0", "node-1", f0, podrelease.FencedTaint.Key, podrelease.OutOfServiceTaint.Key)
	f := newFixture(t, fixtureConfig(), append(taintedNodes(podrelease.FencedTaint, podrelease.OutOfServiceTaint), nf)...)
	f.clock.Set(f0.Add(time.Hour))
	f.repair().Once(context.Background())
	f.expectRequests("get nodes node-1", "update nodes", "update nodefences/status")
	got := f.incident("node-1")
	if steps := stepsOf(got, v1alpha1.StepOrphanPrefix+v1alpha1.StepTaintsRemoved); len(steps) != 1 {
		t.Errorf("%d %s steps in %+v, want 1", len(steps), v1alpha1.StepOrphanPrefix+v1alpha1.StepTaintsRemoved, got.Status.Timeline)
	}
	if got.Status.Leader != "me" || len(got.Status.Remediation.TaintsAdded) != 0 {
		t.Errorf("saved by %q with taints %v recorded, want by me with none", got.Status.Leader, got.Status.Remediation.TaintsAdded)
	}
	f.expectEvents(v1alpha1.ReasonOrphanRepaired)
}

// TestHousekeepingNeedsTheLease (invariant 2): a replica that no longer holds the leader
// Lease (paused past it, partitioned) changes nothing in its housekeeping rounds: no taint
// removed, no incident deleted, no Event; it reads the Lease, learns it was deposed and
// says so, so that main stops it.
func TestHousekeepingNeedsTheLease(t *testing.T) {
	for name, tc := range map[string]struct {
		taints []corev1.Taint
		nf     *v1alpha1.NodeFence
		round  func(*fixture, context.Context)
	}{
		"orphan repair": {[]corev1.Taint{podrelease.FencedTaint}, endedIncident("node-1-x0", "node-1", f0, podrelease.FencedTaint.Key),
			func(f *fixture, ctx context.Context) { f.repair().Once(ctx) }},
		"orphan report": {[]corev1.Taint{podrelease.FencedTaint}, nil, func(f *fixture, ctx context.Context) { f.repair().Once(ctx) }},
		"history prune": {nil, endedIncident("node-1-x0", "node-1", f0.Add(-365*24*time.Hour)), func(f *fixture, ctx context.Context) {
			f.prune()
		}},
	} {
		t.Run(name, func(t *testing.T) {
			objs := taintedNodes(tc.taints...)
			if tc.nf != nil {
				objs = append(objs, tc.nf, endedIncident("node-1-x1", "node-1", f0.Add(time.Minute)))
			}
			f := newFixture(t, fixtureConfig(), objs...)
			deposed := f.depose()
			f.clock.Set(f0.Add(time.Hour))
			tc.round(f, context.Background())
			f.expectRequests("get leases " + f.c.cfg.LeaderElection.Name)
			if !errors.Is(*deposed, leader.ErrStaleEpoch) {
				t.Errorf("OnDeposed told %v, want leader.ErrStaleEpoch", *deposed)
			}
			if ev := f.events(); len(ev) != 0 {
				t.Errorf("events %q from a deposed replica", ev)
			}
			if got := f.nodeTaints("node-1"); len(got) != len(tc.taints) {
				t.Errorf("node-1 taints %v, want %d kept", got, len(tc.taints))
			}
		})
	}
}

// repair is the orphan repair the leader runs beside the fixture's loop.
func (f *fixture) repair() *orphans.Repair {
	if f.orphans == nil {
		f.orphans = orphans.New(orphans.Repair{Nodes: f.c.caches.nodes, Incidents: f.c.store, Releaser: f.c.releaser, Record: f.c.record,

			Check:     func(ctx context.Context) error { return f.c.lead.guard.Check(ctx) },
			Confirmed: func(ctx context.Context) error { return f.c.lead.guard.Confirmed(ctx) }}, f.c.metrics.Registry)
	}
	return f.orphans
}
