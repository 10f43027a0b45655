package sim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

const podsByNodeIndex = "spec.nodeName"

// startKubelets starts the informers the kubelets share, registers every node and starts
// one loop per node. The loops outlive ctx: they end with Stop.
func (c *Cluster) startKubelets(ctx context.Context) error {
	loopCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.nodeByNm = map[string]*Node{}
	for i, spec := range c.opts.Nodes {
		n, err := newNode(c, i, spec)
		if err != nil {
			return err
		}
		if n.kubelet, err = startKubeletPort(n); err != nil {
			return fmt.Errorf("node %s: kubelet port: %w", spec.Name, err)
		}
		c.nodes = append(c.nodes, n)
		c.nodeByNm[spec.Name] = n
	}
	if err := c.startInformers(ctx, loopCtx); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if err := n.register(ctx); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		c.loops.Add(1)
		go n.run(loopCtx)
		signal(n.podsChanged)
	}
	return nil
}

func (c *Cluster) startInformers(ctx, loopCtx context.Context) error {
	c.informers = informers.NewSharedInformerFactory(c.Client, 0)
	pods := c.informers.Core().V1().Pods().Informer()
	err := pods.AddIndexers(cache.Indexers{podsByNodeIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}})
	if err != nil {
		return fmt.Errorf("index pods by node: %w", err)
	}
	onPod := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			c.notify(p.Spec.NodeName)
		}
	}
	all := func(any) { c.notifyAll() }
	_, err = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod,
		UpdateFunc: func(_, obj any) { onPod(obj) }, DeleteFunc: onPod})
	if err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	// Attachments, claims and volumes gate pod start on every node, so any change wakes all.
	for _, inf := range []cache.SharedIndexInformer{
		c.informers.Storage().V1().VolumeAttachments().Informer(),
		c.informers.Core().V1().PersistentVolumeClaims().Informer(),
		c.informers.Core().V1().PersistentVolumes().Informer(),
	} {
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: all,
			UpdateFunc: func(_, obj any) { all(obj) }, DeleteFunc: all})
		if err != nil {
			return fmt.Errorf("watch storage objects: %w", err)
		}
	}
	c.informers.Start(loopCtx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for typ, ok := range c.informers.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			return fmt.Errorf("sync informer cache for %v: %w", typ, syncCtx.Err())
		}
	}
	return nil
}

func (c *Cluster) notify(node string) {
	if n := c.nodeByNm[node]; n != nil {
		signal(n.podsChanged)
	}
}

func (c *Cluster) notifyAll() {
	for _, n := range c.nodes {
		signal(n.podsChanged)
	}
}

// syncPods runs, stops and detaches for every pod bound to this node. Callers hold tickMu
// and have checked the node is alive.
func (n *Node) syncPods(ctx context.Context) {
	objs, err := n.c.informers.Core().V1().Pods().Informer().GetIndexer().
		ByIndex(podsByNodeIndex, n.Name())
	if err != nil {
		n.c.logf("sim: node %s: list pods: %v", n.Name(), err)
		return
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		pod := o.(*corev1.Pod)
		pods = append(pods, pod)
		if err := n.syncPod(ctx, pod); err != nil {
			n.c.logf("sim: node %s: pod %s/%s: %v", n.Name(), pod.Namespace, pod.Name, err)
		}
	}
	n.detachUnused(ctx, pods)
}

func (n *Node) syncPod(ctx context.Context, pod *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if pod.DeletionTimestamp != nil {
		return n.killPod(ctx, pod)
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	n.mu.Lock()
	_, running := n.running[pod.UID]
	n.mu.Unlock()
	if running {
		return nil
	}
	reason, msg, err := n.attachVolumes(ctx, pod)
	if err != nil {
		return err
	}
	if msg != "" {
		return n.reportBlocked(ctx, pod, reason, msg)
	}
	if err := n.markRunning(ctx, pod); err != nil {
		return err
	}
	n.mu.Lock()
	n.running[pod.UID] = pod.Namespace + "/" + pod.Name
	n.mu.Unlock()
	return nil
}

// killPod finishes a graceful deletion the way a kubelet does once containers stopped.
func (n *Node) killPod(ctx context.Context, pod *corev1.Pod) error {
	n.mu.Lock()
	delete(n.running, pod.UID)
	n.mu.Unlock()
	zero := int64(0)
	err := n.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete: %w", err)
	}
	if err == nil {
		n.c.logf("sim: node %s: pod %s/%s stopped and deleted", n.Name(), pod.Namespace, pod.Name)
	}
	return nil
}

// markRunning posts the status of a started pod, unless it already says so (a rebooted
// node restarting the containers of a pod that is still bound to it).
func (n *Node) markRunning(ctx context.Context, pod *corev1.Pod) error {
	if pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "" &&
		podCondition(pod, corev1.PodReady) == corev1.ConditionTrue {
		return nil
	}
	p := pod.DeepCopy()
	now := metav1.Now()
	if p.Status.PodIP == "" {
		p.Status.PodIP = n.allocatePodIP()
	}
	p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
	p.Status.HostIP, p.Status.HostIPs = n.ip, []corev1.HostIP{{IP: n.ip}}
	p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodRunning, "", ""
	if p.Status.StartTime == nil {
		p.Status.StartTime = &now
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers,
		corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		setPodCondition(p, t, corev1.ConditionTrue, "", "", now)
	}
	started := true
	p.Status.ContainerStatuses = nil
	for _, ctr := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: ctr.Name, Image: ctr.Image, ImageID: "sim://" + ctr.Image,
			ContainerID: fmt.Sprintf("sim://%s-%s", p.UID, ctr.Name),
			Ready:       true, Started: &started,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	if _, err := n.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("mark running: %w", err)
	}
	n.c.logf("sim: node %s: pod %s/%s running, ip %s", n.Name(), p.Namespace, p.Name, p.Status.PodIP)
	return nil
}

// reportBlocked leaves the pod not ready with msg in its status and a Warning event, once
// per distinct message, so a blocked pod does not flood the API on every resync.
func (n *Node) reportBlocked(ctx context.Context, pod *corev1.Pod, reason, msg string) error {
	if pod.Status.Message == msg {
		return nil
	}
	p := pod.DeepCopy()
	now := metav1.Now()
	p.Status.Reason, p.Status.Message = reason, msg
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		setPodCondition(p, t, corev1.ConditionFalse, reason, msg, now)
	}
	if _, err := n.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("report %s: %w", reason, err)
	}
	n.c.logf("sim: node %s: pod %s/%s blocked: %s", n.Name(), p.Namespace, p.Name, msg)
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: p.Name + ".", Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod",
			Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Reason: reason, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: n.Name()},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := n.client.CoreV1().Events(p.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("record %s event: %w", reason, err)
	}
	return nil
}

func (n *Node) allocatePodIP() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nextIP++
	return fmt.Sprintf("10.244.%d.%d", n.index+1, 2+n.nextIP%250)
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

func setPodCondition(p *corev1.Pod, t corev1.PodConditionType, status corev1.ConditionStatus,
	reason, msg string, now metav1.Time) {
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message = status, reason, msg
		return
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t,
		Status: status, Reason: reason, Message: msg, LastTransitionTime: now})
}
