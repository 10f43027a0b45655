package app

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// announce runs this replica's identity Lease (who runs where) and marks its pod a
// standby until it leads.
func announce(ctx context.Context, o AppOptions, client kubernetes.Interface, namespace, identity string, registry *prometheus.Registry) *leader.IdentityLeases {
	ids := &leader.IdentityLeases{Client: client, Namespace: namespace, Identity: identity, Owner: podOwner(o, namespace),
		Component: "controller", Node: o.Identity.NodeName, Duration: o.Identity.LeaseDuration, RenewInterval: o.Identity.RenewInterval,
		Metrics: leader.NewIdentityLeaseMetrics(registry), Now: time.Now}
	go ids.Run(ctx)
	if o.LeaderPod != nil {
		if err := leader.SetLeaderCondition(ctx, client, *o.LeaderPod, false); err != nil {
			klog.FromContext(ctx).Error(err, "Marking own pod as standby")
		}
	}
	return ids
}

// campaign runs for leader, and leads while elected; without leader election it leads
// at once, at epoch 0. The channel it returns closes once the election is over; an
// election that fails sends its error on errc.
func campaign(ctx context.Context, client kubernetes.Interface, le v1alpha1.LeaderElection, identity string, reach *leader.Reach,
	lead func(context.Context, int64), deposed func(error), errc chan<- error) <-chan struct{} {
	elected := make(chan struct{})
	if !*le.Enabled {
		close(elected)
		go lead(ctx, 0)
		return elected
	}
	go func() {
		defer close(elected)
		err := leader.Elect(ctx, client, le, identity, reach, lead, func() {
			deposed(errors.New("leader lease lost"))
		})
		if err != nil {
			errc <- err
		}
	}()
	return elected
}

// leading returns what this replica does while it leads at an epoch: it marks its pod as
// the leader, collects expired identity Leases, watches the remote agents and runs c.
func leading(o AppOptions, client kubernetes.Interface, health *Health, ids *leader.IdentityLeases, host *plugin.Host, ctrls *Controllers) func(context.Context, int64) {
	return func(ctx context.Context, epoch int64) {
		health.SetLeader()
		if o.LeaderPod != nil {
			if err := leader.SetLeaderCondition(ctx, client, *o.LeaderPod, true); err != nil {
				klog.FromContext(ctx).Error(err, "Marking own pod as leader")
			}
		}
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			if _, err := ids.Collect(ctx); err != nil {
				klog.FromContext(ctx).Error(err, "Collecting identity leases")
			}
		}, o.Identity.RenewInterval)
		agentLeases := *ids
		agentLeases.Component, agentLeases.Duration, agentLeases.Node = "agent", 3*o.Identity.RenewInterval, ""
		go ctrls.Health.WatchRemoteAgents(ctx, ctrls.Config, host, &agentLeases, o.Identity.RenewInterval)
		ctrls.Lead(ctx, epoch)
	}
}

// awaitEnd returns when ctx ends, or with the error of the server or the election.
func awaitEnd(ctx context.Context, le v1alpha1.LeaderElection, elected <-chan struct{}, errc <-chan error) error {
	select {
	case <-ctx.Done():
		// A clean shutdown gives the Lease up (ReleaseOnCancel) so that a standby takes
		// over after one retry period rather than a whole lease duration; the election
		// does it once its renew loop sees the end, within the renew deadline.
		select {
		case <-elected:
		case <-time.After(le.RenewDeadline.Duration + le.RetryPeriod.Duration):
			klog.FromContext(ctx).Info("Leader Lease not released in time; exiting", "lease", le.Namespace+"/"+le.Name)
		}
		return nil
	case err := <-errc:
		return err
	}
}

// podOwner is the owner reference of this replica's pod, or nil outside a pod. An owner
// must be in its dependent's namespace: the garbage collector deletes a Lease whose owner
// it cannot find there, which would hide a live replica.
func podOwner(o AppOptions, leaseNamespace string) *metav1.OwnerReference {
	if o.Pod.Name == "" || o.Pod.UID == "" || o.Pod.Namespace != leaseNamespace {
		return nil
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: o.Pod.Name, UID: types.UID(o.Pod.UID)}
}
