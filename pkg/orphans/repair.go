package orphans

import (
	"context"
	"slices"
	"sort"
	"time"

	corelisters "k8s.io/client-go/listers/core/v1"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/incidents"
	"github.com/kubefence/kubefence/pkg/podrelease"
	"github.com/prometheus/client_golang/prometheus"
)

// Record is how a repair goes on its incident's record: a step, an Event, and the save at
// the leader's epoch (after a Lease check); pkg/app hands it the incidents.Recorder the
// incident loop records its own steps with.
type Record interface {
	Step(ctx context.Context, nf *v1alpha1.NodeFence, typ, msg string)
	Event(node *corev1.Node, nf *v1alpha1.NodeFence, typ, reason, format string, args ...any)
	Save(ctx context.Context, nf *v1alpha1.NodeFence) error
}

// Repair finds what a dead predecessor left behind: kubefence's taints on nodes with no
// open incident behind them. Only the leader runs it.
type Repair struct {
	Nodes     corelisters.NodeLister
	Incidents *incidents.Store
	Releaser  *podrelease.Releaser
	Record    Record
	// Check reads the leader Lease fresh; Confirmed passes when a check passed within the
	// renew deadline. Nothing is touched while either fails.
	Check, Confirmed func(ctx context.Context) error

	outcomes *prometheus.CounterVec
}

// Outcomes of kubefence_orphans_total.
const (
	Repaired = "repaired"
	Reported = "reported"
)

// New is r with its metric registered on reg.
func New(r Repair, reg prometheus.Registerer) *Repair {
	r.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubefence_orphans_total",
		Help: "Changes kubefence found on nodes with no open incident behind them, by outcome (repaired, reported).",
	}, []string{"outcome"})
	reg.MustRegister(r.outcomes)
	return &r
}

// Run repairs at take-over and then every minute, until ctx ends.
func (r *Repair) Run(ctx context.Context) { wait.UntilWithContext(ctx, r.Once, time.Minute) }

// Once compares what kubefence changed on nodes with its incidents, as the
// kuryr HA design asks of a leader that took over from one that died mid-step. A taint
// recorded by a closed incident, in its record or in the node's owner mark naming it, is
// removed; kubefence's own taint with neither behind it is reported and left for a
// person: it is never guessed at.
func (r *Repair) Once(ctx context.Context) {
	nodes, err := r.Nodes.List(labels.Everything())
	if err != nil {
		return // a cache read; the next round (a minute on) tries again
	}
	for _, n := range nodes {
		if !hasTaintKey(n, podrelease.FencedTaint.Key) && !hasTaintKey(n, podrelease.OutOfServiceTaint.Key) {
			continue
		}
		incs, err := r.Incidents.ForNode(n.Name)
		if err != nil {
			continue // an incident the cache cannot decode: a person looks, not a guess
		}
		if slices.ContainsFunc(incs, func(nf *v1alpha1.NodeFence) bool { return nf.Status.Phase.Open() }) {
			continue // the open incident owns its changes and will undo them
		}
		r.repair(ctx, n, incs)
	}
}

func (r *Repair) repair(ctx context.Context, n *corev1.Node, incs []*v1alpha1.NodeFence) {
	sort.Slice(incs, func(i, j int) bool { return incs[j].CreationTimestamp.Before(&incs[i].CreationTimestamp) })
	for _, nf := range incs {
		if len(nf.Status.Remediation.TaintsAdded) == 0 && len(podrelease.Owned(n, nf.Name)) == 0 {
			continue
		}
		nf = nf.DeepCopy()
		ctx := klog.NewContext(ctx, klog.LoggerWithValues(klog.FromContext(ctx), "node", n.Name, "incident", nf.Name))
		if err := r.Check(ctx); err != nil {
			return // not confirmed as leader: nothing is touched; the check acted on a deposition
		}
		rem := *r.Releaser
		rem.OnStep = func(step, msg string) { r.Record.Step(ctx, nf, v1alpha1.StepOrphanPrefix+step, msg) }
		removed, err := rem.RemoveTaints(ctx, nf.Name, n.Name, &nf.Status.Remediation)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Repairing orphaned taints")
			return
		}
		if len(removed) > 0 {
			r.outcomes.WithLabelValues(Repaired).Inc()
			r.Record.Event(n, nf, corev1.EventTypeWarning, v1alpha1.ReasonOrphanRepaired,
				"Removed taints %v of node %s that closed incident %s recorded but had not removed", removed, n.Name, nf.Name)
		}
		// A record whose taints were gone already is cleared, and the next record (or
		// an unrecorded fenced taint) is looked at in the next round.
		if err := r.Record.Save(ctx, nf); err != nil {
			klog.FromContext(ctx).Error(err, "Recording orphan repair")
		}
		return
	}
	if hasTaintKey(n, podrelease.FencedTaint.Key) {
		// An Event is a mutation too: it follows a Lease check (invariant 2).
		if err := r.Confirmed(ctx); err != nil {
			return // not confirmed as leader: no Event
		}
		r.outcomes.WithLabelValues(Reported).Inc()
		r.Record.Event(n, nil, corev1.EventTypeWarning, v1alpha1.ReasonOrphanTaint,
			"Node %s carries %s but no incident records adding it; left in place for a person to check",
			n.Name, podrelease.FencedTaint.Key)
	}
}

func hasTaintKey(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}
