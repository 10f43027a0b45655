package podrelease

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/kubefence/kubefence/pkg/caches"
)

// OnCaches is the process's Releaser, made by pkg/app for every controller that
// releases or undoes (the incident loop, the orphan repair): it reads a node, its pods
// and the VolumeAttachments from the shared caches kube (pkg/caches indexes the pods by
// node), writes with client and dates its steps with now. replacementWait is
// ReplacementWait: zero means DefaultReplacementWait, below zero no wait.
func OnCaches(client kubernetes.Interface, kube informers.SharedInformerFactory, now func() time.Time, replacementWait time.Duration) *Releaser {
	if replacementWait == 0 {
		replacementWait = DefaultReplacementWait
	}
	pods := kube.Core().V1().Pods().Informer()
	nodes := kube.Core().V1().Nodes().Lister()
	attachments := kube.Storage().V1().VolumeAttachments().Lister()
	return &Releaser{Client: client, Attachments: SharedAttachments(client), ReplacementWait: replacementWait, Now: now,
		Pods: func(node string) []*corev1.Pod { return caches.PodsOn(pods, node) },
		CachedAttachments: func() []*storagev1.VolumeAttachment {
			vas, _ := attachments.List(labels.Everything()) // a cache read fails only on a selector it cannot use
			return vas
		},
		Node: func(name string) (*corev1.Node, bool) {
			n, err := nodes.Get(name)
			if err != nil {
				return nil, false
			}
			return n.DeepCopy(), true
		}}
}
