package realnode

// A user's story on the cluster, shared by the tests, make demo-cluster and
// make bench-realnode: install the chart as docs/getting-started.md says, run a
// StatefulSet pod with a CSI volume, fail its node, see kubefence fence it and the pod move,
// power the node on again.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/test/sim"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// ChartDir is deploy/helm/kubefence in this tree.
func ChartDir() (string, error) {
	root, err := sim.ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "deploy", "helm", "kubefence"), nil
}

// Install builds the image and pushes it to the cluster's registry, creates the BMC
// Secret and node annotations of docs/getting-started.md, and installs the chart with its
// defaults and the given values files. It returns what the image push and helm printed.
func (c *Cluster) Install(ctx context.Context, values ...string) (string, error) {
	images, err := c.PushKubefence(ctx)
	if err != nil {
		return "", err
	}
	if err := c.PrepareBMCAccess(ctx); err != nil {
		return "", err
	}
	chart, err := ChartDir()
	if err != nil {
		return "", err
	}
	args := []string{"install", Release, chart, "-n", Namespace, "--wait", "--timeout", "5m"}
	for _, v := range values {
		args = append(args, "-f", v)
	}
	out, err := c.Helm(ctx, args...)
	return images + out, err
}

// WaitFor polls cond every 250ms until it holds or ctx ends; the error names what it
// waited for and cond's last error.
func WaitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// LeaderNode is the node of the controller replica that holds the leader Lease.
func (c *Cluster) LeaderNode(ctx context.Context) (string, error) {
	var holder string
	err := WaitFor(ctx, "a leader", func() (bool, error) {
		l, err := c.Client.CoordinationV1().Leases(Namespace).Get(ctx, controllerName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, err
		}
		holder = *l.Spec.HolderIdentity
		return holder != "", nil
	})
	if err != nil {
		return "", err
	}
	pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if strings.HasPrefix(holder, p.Name) {
			return p.Spec.NodeName, nil
		}
	}
	return "", fmt.Errorf("leader %q is no pod of %s", holder, Namespace)
}

// StatefulSet is one replica of busybox with a volume of the test's CSI driver (the claim
// data-NAME-0, bound in advance to the volume NAME-data), preferring node.
func StatefulSet(name, node string) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](5),
					Affinity:                      prefer(node),
					Containers: []corev1.Container{{
						Name: "app", Image: BusyboxImage,
						Command:      []string{"/bin/sh", "-c", "while true; do date >> /data/log; sleep 1; done"},
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					StorageClassName: ptr.To(StorageClass),
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
}

// prefer is a node affinity for node, preferred but not required, so the pod can move.
func prefer(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{
				Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}},
		}},
	}}
}

// RunningPod returns the pod ns/name when it runs (all containers started), else nil.
func (c *Cluster) RunningPod(ctx context.Context, ns, name string) *corev1.Pod {
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return nil
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return nil
		}
	}
	return p
}

// startedAt is when the pod's first container started, by the kubelet's report.
func startedAt(p *corev1.Pod) time.Time {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil {
			return cs.State.Running.StartedAt.Time
		}
	}
	return time.Time{}
}

// MovePod makes the StatefulSet sts's pod run on node (its volume follows through the
// attach path).
func (c *Cluster) MovePod(ctx context.Context, sts, node string) error {
	pod := sts + "-0"
	if p := c.RunningPod(ctx, "default", pod); p != nil && p.Spec.NodeName == node {
		return nil
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":100,"preference":{"matchFields":[{"key":"metadata.name","operator":"In","values":[%q]}]}}]}}}}}}`, node)
	if _, err := c.Client.AppsV1().StatefulSets("default").Patch(ctx, sts, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return err
	}
	// When the template already preferred node (an earlier round's target), the patch
	// changes nothing and rolls nothing: delete the pod so it is placed again.
	if p, err := c.Client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{}); err == nil && p.Spec.NodeName != node {
		if err := c.Client.CoreV1().Pods("default").Delete(ctx, pod, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
	}
	return WaitFor(ctx, pod+" running on "+node, func() (bool, error) {
		p := c.RunningPod(ctx, "default", pod)
		return p != nil && p.Spec.NodeName == node, nil
	})
}

// Failure is what one node's failure led to, by the clocks of this machine.
type Failure struct {
	Node    string
	MovedTo string    // the node the StatefulSet pod runs on now
	Began   time.Time // the node died (or froze)
	Off     time.Time // its BMC cut power, by the BMC's log
	// The volume's detach from the node and attach to MovedTo, by the CSI driver's log.
	Detached, Attached time.Time
	Started            time.Time // the pod's container started on MovedTo, by its kubelet (1 s)
}

// Fail kills node (every process at once, its BMC still on), or with hang freezes it, and
// waits until the StatefulSet sts's pod runs on another node; then it thaws a frozen node,
// which, had it not been powered off, would now run the pod a second time. It fails
// unless the BMC cut the node's power before the volume vol was detached from it,
// attached elsewhere, and the pod started elsewhere.
func (c *Cluster) Fail(ctx context.Context, node, sts, vol string, hang bool) (*Failure, error) {
	f := &Failure{Node: node, Began: time.Now()}
	if hang {
		if err := c.Node(node).Freeze(ctx); err != nil {
			return nil, err
		}
	} else if err := c.Crash(ctx, node); err != nil {
		return nil, err
	}
	pod := sts + "-0"
	var moved *corev1.Pod
	if err := WaitFor(ctx, pod+" running on another node than "+node, func() (bool, error) {
		moved = c.RunningPod(ctx, "default", pod)
		return moved != nil && moved.Spec.NodeName != node, nil
	}); err != nil {
		return nil, err
	}
	if hang {
		if err := c.Node(node).Thaw(); err != nil {
			return nil, err
		}
	}
	f.MovedTo, f.Started = moved.Spec.NodeName, startedAt(moved)
	var err error
	if f.Off, err = powerOffAfter(c.BMC(node), f.Began); err != nil {
		return f, err
	}
	if f.Detached, f.Attached, err = c.volumeMoves(vol, node, f.MovedTo, f.Began); err != nil {
		return f, err
	}
	// The storage's own log has nanoseconds; the kubelet's StartedAt only seconds.
	if !f.Off.Before(f.Detached) || !f.Off.Before(f.Attached) || !f.Off.Before(f.Started.Add(time.Second)) {
		return f, fmt.Errorf("%s's BMC cut power at %s, after its volume was detached (%s) or attached elsewhere (%s) or %s started elsewhere (%s)",
			node, f.Off.Format(time.RFC3339Nano), f.Detached.Format(time.RFC3339Nano), f.Attached.Format(time.RFC3339Nano), pod, f.Started.Format(time.RFC3339))
	}
	return f, nil
}

// String is the failure's times, from its beginning.
func (f *Failure) String() string {
	return fmt.Sprintf("%s fenced: BMC off %s after the failure, volume detached from it %s, attached to %s %s, pod started there %s",
		f.Node, since(f.Began, f.Off), since(f.Began, f.Detached), f.MovedTo, since(f.Began, f.Attached), since(f.Began, f.Started))
}

func since(from, to time.Time) string { return to.Sub(from).Round(100 * time.Millisecond).String() }

// PowerOn powers node on through its BMC, as its owner would after a fence, and waits
// until it is Ready with a boot ID other than oldBoot and no taint left.
func (c *Cluster) PowerOn(ctx context.Context, node, oldBoot string) error {
	if err := c.BMC(node).SetPower(true); err != nil {
		return err
	}
	// A node boots in seconds here; minutes mean it never will (its kubelet log says why).
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	return WaitFor(ctx, node+" back, Ready, with a new boot ID and no taint", func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if nodeReady(n) && n.Status.NodeInfo.BootID != oldBoot && len(n.Spec.Taints) == 0 {
			return true, nil
		}
		return false, fmt.Errorf("%s: Ready %t, boot ID %s (old %s), taints %v", node, nodeReady(n), n.Status.NodeInfo.BootID, oldBoot, n.Spec.Taints)
	})
}

// powerOffAfter is when the BMC first cut power on a request over IPMI after from.
func powerOffAfter(b *bmc.IPMISim, from time.Time) (time.Time, error) {
	events, err := b.Events()
	if err != nil {
		return time.Time{}, err
	}
	for _, e := range events {
		if e.Action == bmc.ActionOff && e.Source == "bmc" && e.Time.After(from) {
			return e.Time, nil
		}
	}
	return time.Time{}, fmt.Errorf("the BMC did not power off after %s: events %v", from.Format(time.RFC3339Nano), events)
}

// volumeMoves finds, in the driver's own log after from, the detach of vol from the dead
// node and its attach to the new one; the storage never held it for both.
func (c *Cluster) volumeMoves(vol, dead, now string, from time.Time) (detached, attached time.Time, err error) {
	log, err := c.Attachments()
	if err != nil {
		return detached, attached, err
	}
	for _, a := range log {
		if a.Volume != vol || a.Time.Before(from) {
			continue
		}
		switch {
		case a.Action == "detach" && a.Node == dead && detached.IsZero():
			detached = a.Time
		case a.Action == "attach" && a.Node == now && !detached.IsZero() && attached.IsZero():
			attached = a.Time
		}
	}
	if detached.IsZero() || attached.IsZero() {
		return detached, attached, fmt.Errorf("the driver's log has no detach of %s from %s followed by an attach to %s after %s: %+v", vol, dead, now, from.Format(time.RFC3339Nano), log)
	}
	return detached, attached, nil
}
