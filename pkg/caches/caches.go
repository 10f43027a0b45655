// Package caches is the informer factories the controller process shares: every
// controller of the process (the incident loop, the health checkers' requests, the node
// agents' observer, the device monitor, the orphan repair) reads from the one set pkg/app
// makes, so each object kind is listed and watched once. It owns the caches' trimming
// (what kubefence never reads is dropped before caching) and their start and sync; it
// writes nothing.
package caches

import (
	"context"
	"fmt"
	"reflect"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kubefence/kubefence/pkg/detector"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	fencinginformers "github.com/kubefence/kubefence/pkg/generated/informers/externalversions"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/nodeagent"
)

// resync is how often the caches hand every object to their handlers again.
const resync = 10 * time.Minute

// Set is the process's informer factories, one per kind of watch.
type Set struct {
	// Kube watches Nodes, Pods, PodDisruptionBudgets and VolumeAttachments cluster-wide.
	Kube informers.SharedInformerFactory
	// NodeLeases watches the kubelets' Leases (kube-node-lease).
	NodeLeases informers.SharedInformerFactory
	// Identities watches the controller replicas' identity Leases.
	Identities informers.SharedInformerFactory
	// Fencing watches NodeFences and KubefenceRemediations.
	Fencing fencinginformers.SharedInformerFactory
	// Reports watches the node agents' report Leases in their namespace.
	Reports informers.SharedInformerFactory
	// Pauses watches the pause requests: the ConfigMap pauseName in the controller's
	// namespace (identityNS), by name, so that the controller may read that one only.
	Pauses informers.SharedInformerFactory
}

// New is the set for client and fencing; identityNS holds the replicas' identity Leases
// and the pause ConfigMap pauseName, reportNS the node agents' reports.
func New(client kubernetes.Interface, fencing versioned.Interface, identityNS, reportNS, pauseName string) (*Set, error) {
	s := &Set{
		Kube:       informers.NewSharedInformerFactory(client, resync),
		NodeLeases: informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithNamespace(detector.LeaseNamespace)),
		Identities: informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithNamespace(identityNS),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = leader.IdentityLabel + "=true," + leader.ComponentLabel + "=controller"
			})),
		Fencing: fencinginformers.NewSharedInformerFactory(fencing, resync),
		Pauses: informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithNamespace(identityNS),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + pauseName })),
		Reports: informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithNamespace(reportNS),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = nodeagent.ComponentLabel + "=" + nodeagent.Component
			})),
	}
	// Caches of every node, lease and pod are the controller's memory; drop what it never
	// reads.
	for _, inf := range []cache.SharedIndexInformer{s.Kube.Core().V1().Nodes().Informer(),
		s.NodeLeases.Coordination().V1().Leases().Informer(), s.Kube.Core().V1().Pods().Informer()} {
		if err := inf.SetTransform(detector.TrimForCache); err != nil {
			return nil, fmt.Errorf("trim cache: %w", err)
		}
	}
	return s, nil
}

// Start starts every informer a controller asked for, and waits until each has synced.
func (s *Set) Start(ctx context.Context) error {
	s.Kube.Start(ctx.Done())
	s.NodeLeases.Start(ctx.Done())
	s.Identities.Start(ctx.Done())
	s.Fencing.Start(ctx.Done())
	s.Reports.Start(ctx.Done())
	s.Pauses.Start(ctx.Done())
	for _, synced := range []map[reflect.Type]bool{s.Kube.WaitForCacheSync(ctx.Done()), s.NodeLeases.WaitForCacheSync(ctx.Done()),
		s.Identities.WaitForCacheSync(ctx.Done()), s.Fencing.WaitForCacheSync(ctx.Done()), s.Reports.WaitForCacheSync(ctx.Done()),
		s.Pauses.WaitForCacheSync(ctx.Done())} {
		for kind, ok := range synced {
			if !ok {
				return fmt.Errorf("informer cache of %v did not sync", kind)
			}
		}
	}
	return nil
}
