package remediate

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// DefaultEvictionWait is how long a release with the out-of-service taint waits for
// kube-controller-manager's taint eviction (Remediator.EvictionWait).
const DefaultEvictionWait = 2 * time.Second

// evictionPoll is how often the wait looks at the node's pods.
const evictionPoll = 50 * time.Millisecond

// awaitTaintEviction waits, up to EvictionWait, until every pod of the node that the
// out-of-service taint evicts and whose name comes back (awaited) has been deleted by
// somebody: kube-controller-manager's taint eviction deletes it gracefully, leaving a
// deletionTimestamp on a pod whose kubelet is gone. The eviction gets and deletes a pod
// by name, not by UID, queued from a cache that can lag the API server: had this release
// force-deleted such a pod first, its StatefulSet's replacement, of the same name on a
// healthy node, could be the one it deleted (it happened on real nodes, with the taint
// added last). Once the eviction has deleted the pod, its work for that name is done,
// and the force deletion that follows (with the pod's UID as a precondition) lets the
// replacement come. Past the wait (the eviction controller disabled, or behind), the
// release goes on and says so in the log.
func (r *Remediator) awaitTaintEviction(ctx context.Context, nodeName string) {
	if r.EvictionWait <= 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, r.EvictionWait)
	defer cancel()
	tick := time.NewTicker(evictionPoll)
	defer tick.Stop()
	var left []string
	for {
		pods, err := r.podsOn(wctx, nodeName)
		if err == nil {
			if left = awaited(pods, nodeName); len(left) == 0 {
				return
			}
		}
		select {
		case <-wctx.Done():
			if ctx.Err() == nil {
				klog.FromContext(ctx).Info("Taint eviction did not delete these pods of the fenced node in time; deleting them now",
					"node", nodeName, "pods", left, "waited", r.EvictionWait)
			}
			return
		case <-tick.C:
		}
	}
}

// awaited names the pods of node that the out-of-service taint evicts (no toleration of
// it), whose name comes back when they are deleted (no generateName: a StatefulSet's, a
// bare pod) and that nobody has deleted yet.
func awaited(pods []*corev1.Pod, node string) []string {
	var out []string
	for _, p := range pods {
		if p.Spec.NodeName != node || p.GenerateName != "" || p.DeletionTimestamp != nil {
			continue
		}
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			// The eviction deletes these too, but nothing waits on their names.
			continue
		}
		if !toleratesOutOfService(p) {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	return out
}

func toleratesOutOfService(p *corev1.Pod) bool {
	for i := range p.Spec.Tolerations {
		if p.Spec.Tolerations[i].ToleratesTaint(klog.Background(), &OutOfServiceTaint, false) {
			return true
		}
	}
	return false
}
