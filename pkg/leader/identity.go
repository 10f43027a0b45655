package leader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Labels of identity Leases, so that `kubectl get leases -l` lists who is alive.
const (
	IdentityLabel  = "fencing.kubefence.io/identity"
	ComponentLabel = "fencing.kubefence.io/component"
)

// IdentityLeases keeps this replica's own Lease, as the apiserver-identity proposal does
// for kube-apiservers: every replica, leader or standby, renews a Lease named after its
// identity, and the leader deletes the Leases nobody renewed within their duration.
type IdentityLeases struct {
	Client    kubernetes.Interface
	Namespace string
	Identity  string
	// Component is "controller", or "agent" for the Leases the leader keeps for remote agents.
	Component string
	// Node is the node the replica runs on, set as the Lease's NodeLabel: the leader never
	// fences a node whose replica renews. Empty outside a pod.
	Node string
	// Owner, when set, owns the Lease: the replica's pod, so that the garbage collector
	// removes the Lease with it. It must be in Namespace.
	Owner *metav1.OwnerReference
	// Duration is how long a Lease lives without renewal before it is collected.
	Duration time.Duration
	// RenewInterval is how often the Lease is renewed.
	RenewInterval time.Duration
	// Metrics, if set, is told of every renewal of the replica's own Lease.
	Metrics IdentityMetrics
	Now     func() time.Time
}

// LeaseName is the Lease name of an identity: identities (hostname_PID_suffix) are not
// valid object names, their hash is.
func LeaseName(component, identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return fmt.Sprintf("kubefence-%s-%s", component, hex.EncodeToString(sum[:6]))
}

// Run renews the Lease until ctx ends, then deletes it (a clean exit leaves nothing to collect).
func (l *IdentityLeases) Run(ctx context.Context) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		err := l.Renew(ctx, l.Identity)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Renewing identity lease", "identity", l.Identity)
		}
		if l.Metrics != nil {
			l.Metrics.Renewal(err == nil)
		}
	}, l.RenewInterval)
	del, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := l.Client.CoordinationV1().Leases(l.Namespace).Delete(del, LeaseName(l.Component, l.Identity), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Error(err, "Deleting identity lease on exit", "identity", l.Identity)
	}
}

// Renew creates or renews the Lease of identity.
func (l *IdentityLeases) Renew(ctx context.Context, identity string) error {
	leases := l.Client.CoordinationV1().Leases(l.Namespace)
	name := LeaseName(l.Component, identity)
	now := metav1.NewMicroTime(l.Now())
	secs := int32(l.Duration / time.Second)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.Namespace, Labels: l.labels(nil), Annotations: l.annotations(nil),
				OwnerReferences: l.owners(identity)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &identity, LeaseDurationSeconds: &secs,
				AcquireTime: &now, RenewTime: &now},
		}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create identity lease %s/%s: %w", l.Namespace, name, err)
		}
		l.observe(lease)
		return nil
	}
	if err != nil {
		return fmt.Errorf("read identity lease %s/%s: %w", l.Namespace, name, err)
	}
	lease.Spec.RenewTime, lease.Spec.LeaseDurationSeconds = &now, &secs
	lease.Labels, lease.Annotations = l.labels(lease.Labels), l.annotations(lease.Annotations)
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renew identity lease %s/%s: %w", l.Namespace, name, err)
	}
	l.observe(lease)
	return nil
}

// labels are the Lease's labels: what it had, with this identity's.
func (l *IdentityLeases) labels(had map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range had {
		out[k] = v
	}
	out[IdentityLabel], out[ComponentLabel] = "true", l.Component
	if l.Node != "" {
		out[v1alpha1.NodeLabel] = v1alpha1.LabelValue(l.Node)
	}
	return out
}

// annotations are the Lease's annotations: what it had, with the node's whole name (the
// label holds at most 63 characters of it).
func (l *IdentityLeases) annotations(had map[string]string) map[string]string {
	if l.Node == "" {
		return had
	}
	out := map[string]string{}
	for k, v := range had {
		out[k] = v
	}
	out[v1alpha1.NodeAnnotation] = l.Node
	return out
}

func (l *IdentityLeases) observe(lease *coordinationv1.Lease) {
	if l.Metrics == nil || l.Component != "controller" {
		return
	}
	var acquired time.Time
	if lease.Spec.AcquireTime != nil {
		acquired = lease.Spec.AcquireTime.Time
	}
	l.Metrics.Renewed(acquired, lease.Spec.RenewTime.Time)
}

// IdentityMetrics receives what IdentityLeases does with the replica's own Lease.
type IdentityMetrics interface {
	// Renewal is each renewal attempt and whether it worked.
	Renewal(ok bool)
	// Renewed is the Lease as written: when it was first acquired (zero if unknown) and
	// renewed.
	Renewed(acquired, renewed time.Time)
}

// Collect deletes identity Leases of any component whose renewal is older than their
// duration. Only the leader calls it.
func (l *IdentityLeases) Collect(ctx context.Context) (int, error) {
	leases := l.Client.CoordinationV1().Leases(l.Namespace)
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: IdentityLabel + "=true"})
	if err != nil {
		return 0, fmt.Errorf("list identity leases: %w", err)
	}
	now, n := l.Now(), 0
	for i := range list.Items {
		lease := &list.Items[i]
		if !expired(lease, now) {
			continue
		}
		rv := lease.ResourceVersion
		err := leases.Delete(ctx, lease.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return n, fmt.Errorf("collect identity lease %s: %w", lease.Name, err)
		}
		if err == nil {
			n++
			klog.FromContext(ctx).Info("Collected expired identity lease", "lease", lease.Name, "holder", ptr.Deref(lease.Spec.HolderIdentity, ""))
		}
	}
	return n, nil
}

func expired(lease *coordinationv1.Lease, now time.Time) bool {
	s := lease.Spec
	if s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return false
	}
	return now.After(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second))
}

// owners are the owner references of identity's Lease: this replica's pod, when it is
// known, for this replica's own Lease.
func (l *IdentityLeases) owners(identity string) []metav1.OwnerReference {
	if l.Owner == nil || identity != l.Identity {
		return nil
	}
	return []metav1.OwnerReference{*l.Owner}
}
