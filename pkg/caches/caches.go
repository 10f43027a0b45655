// Package caches is the informer factories the controller process shares: every
// controller of the process (the incident loop, the health checkers' requests, the node
// agents' observer, the device monitor, the orphan repair) reads from the one set pkg/app
// makes, so each object kind is listed and watched once. It owns the caches' trimming
// (what kubefence never reads is dropped before caching), their indexes (pods by node)
// and their start and sync: a cache that does not sync in time is an error naming it and
// the last error its list or watch met (tracked.go). It writes nothing.
package caches

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	policylisters "k8s.io/client-go/listers/policy/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
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
	// Dynamic watches the optional kinds of other projects that the controllers read when
	// their CustomResourceDefinitions are installed (pkg/maintenance); nil without a
	// dynamic client.
	Dynamic dynamicinformer.DynamicSharedInformerFactory
	// Pauses watches the pause requests: the ConfigMap pauseName in the controller's
	// namespace (identityNS), by name, so that the controller may read that one only.
	Pauses informers.SharedInformerFactory

	// waiters are the factories above, which Start starts and waits for.
	waiters []waiter
}

// New is the set for client, fencing and dyn (nil: no dynamic factory); identityNS holds
// the replicas' identity Leases and the pause ConfigMap pauseName, reportNS the node
// agents' reports.
func New(client kubernetes.Interface, fencing versioned.Interface, dyn dynamic.Interface, identityNS, reportNS, pauseName string) (*Set, error) {
	kube := newKubeFactory(client, metav1.NamespaceAll, nil)
	nodeLeases := newKubeFactory(client, detector.LeaseNamespace, nil)
	identities := newKubeFactory(client, identityNS, func(o *metav1.ListOptions) {
		o.LabelSelector = leader.ReplicaSelector
	})
	fencingF := newFencingFactory(fencing)
	pauses := newKubeFactory(client, identityNS, func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + pauseName })
	reports := newKubeFactory(client, reportNS, func(o *metav1.ListOptions) {
		o.LabelSelector = nodeagent.ComponentLabel + "=" + nodeagent.Component
	})
	s := &Set{Kube: kube, NodeLeases: nodeLeases, Identities: identities, Fencing: fencingF, Pauses: pauses, Reports: reports,
		waiters: []waiter{kube, nodeLeases, identities, fencingF, reports, pauses}}
	if dyn != nil {
		d := &dynamicFactory{DynamicSharedInformerFactory: dynamicinformer.NewDynamicSharedInformerFactory(dyn, resync),
			tracker: newTracker(metav1.NamespaceAll, nil)}
		s.Dynamic, s.waiters = d, append(s.waiters, d)
	}
	// Caches of every node, lease and pod are the controller's memory; drop what it never
	// reads.
	for _, inf := range []cache.SharedIndexInformer{s.Kube.Core().V1().Nodes().Informer(),
		s.NodeLeases.Coordination().V1().Leases().Informer(), s.Kube.Core().V1().Pods().Informer()} {
		if err := inf.SetTransform(detector.TrimForCache); err != nil {
			return nil, fmt.Errorf("trim cache: %w", err)
		}
	}
	if err := s.Kube.Core().V1().Pods().Informer().AddIndexers(cache.Indexers{podsByNodeIndex: podsByNode}); err != nil {
		return nil, fmt.Errorf("index pods: %w", err)
	}
	return s, nil
}

const podsByNodeIndex = "byNode"

func podsByNode(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

// PodsOn returns the pods bound to node in pods, the Set's pod cache.
func PodsOn(pods cache.SharedIndexInformer, node string) []*corev1.Pod {
	objs, err := pods.GetIndexer().ByIndex(podsByNodeIndex, node)
	if err != nil {
		return nil // only for an informer New did not index
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
}

// UrgentPDBs are the PodDisruptionBudgets in pdbs (the Set's cache) that allow no
// disruption now: the only ones that can make a node urgent (policy.Urgent).
func UrgentPDBs(pdbs policylisters.PodDisruptionBudgetLister) []*policyv1.PodDisruptionBudget {
	all, err := pdbs.List(labels.Everything())
	if err != nil {
		return nil // a cache read that cannot fail on labels.Everything(); without PDBs no pod is urgent
	}
	out := all[:0:0]
	for _, pdb := range all {
		if pdb.Status.DisruptionsAllowed <= 0 {
			out = append(out, pdb)
		}
	}
	return out
}

// AttachmentsOn counts the VolumeAttachments in vas (the Set's cache) of node.
func AttachmentsOn(vas storagelisters.VolumeAttachmentLister, node string) int {
	all, err := vas.List(labels.Everything())
	if err != nil {
		return 0 // a cache read that cannot fail on labels.Everything()
	}
	n := 0
	for _, va := range all {
		if va.Spec.NodeName == node {
			n++
		}
	}
	return n
}
