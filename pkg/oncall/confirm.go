package oncall

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/nodeview"
	"github.com/kubefence/kubefence/pkg/oncall/life"
)

// DefaultIdentityRenewInterval is fence-controller's --identity-renew-interval default:
// how often each replica renews its identity Lease, which explain takes when
// Explainer.IdentityRenewInterval is zero.
const DefaultIdentityRenewInterval = 5 * time.Second

// confirmOff says what a person's confirm-off on nf would do now, answered as the leader
// answers one (Decide), on the signs of the node's life explain can read (signs); "" when
// a confirm-off would not move nf.
func (e Explainer) confirmOff(ctx context.Context, nf *v1alpha1.NodeFence, obs detector.Observation, replicas nodeview.Replicas, now time.Time) string {
	w := Word{Kind: ConfirmOff, By: "you", Reason: "the node is off"}
	if Decide(nf, w, Facts{}).Act != ActRead {
		return ""
	}
	signs, err := e.signs(ctx, nf.Spec.NodeName, obs, replicas, now)
	if err != nil {
		return fmt.Sprintf("whether a confirm-off would be taken is unknown: %v", err)
	}
	if a := Decide(nf, w, Facts{Read: true, Life: signs}); a.Act == ActRefuse {
		return "a confirm-off now would be " + strings.TrimPrefix(a.Message, w.String()+" ")
	}
	return fmt.Sprintf("a confirm-off now would release the node: nothing explain can read shows it alive (its Lease, the replicas' identity Leases, its agent's report, the incident's record); the leader reads them again, with its kubelet probes, and asks whether the word's author may create nodefences/%s",
		v1alpha1.SubresourceConfirm)
}

// signs gathers the signs of node's life explain can read: its Lease as explain's
// detector judges it (obs), the replicas' identity Leases (replicas, as Explain read
// them or the loop follows them) and its agent's report Lease (labelled with the node), seen at its renewTime, on
// its writer's clock, as explain's detector sees the kubelets' Leases.
func (e Explainer) signs(ctx context.Context, node string, obs detector.Observation, replicas nodeview.Replicas, now time.Time) (life.Signs, error) {
	l := life.Signs{At: now}
	if obs.Health != detector.Unhealthy {
		l.Kubelet = "its Lease shows it " + string(obs.Health) + ": " + obs.Evidence
	}
	wd := e.Config.Watchdog
	sel := metav1.ListOptions{LabelSelector: v1alpha1.NodeLabel + "=" + v1alpha1.LabelValue(node)}
	leases, err := e.Kube.CoordinationV1().Leases(wd.Namespace).List(ctx, sel)
	if err != nil {
		return l, fmt.Errorf("list the Leases of node %s in %s: %w", node, wd.Namespace, err)
	}
	for i := range leases.Items {
		lease := &leases.Items[i]
		// A node agent's report Lease: the agent holds it in its node's name.
		if lease.Spec.RenewTime != nil && lease.Labels[leader.IdentityLabel] != "true" && ptr.Deref(lease.Spec.HolderIdentity, "") == node {
			if s := life.ReportSeen(lease, lease.Spec.RenewTime.Time, wd.ReportMaxAge.Duration); s.At.After(l.Agent.At) {
				l.Agent = s
			}
		}
	}
	if replicas != nil {
		l.Replica, _ = replicas.On(node, now)
	}
	return l, nil
}
