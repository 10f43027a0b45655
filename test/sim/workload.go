package sim

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

const (
	// Namespace is where workloads are deployed.
	Namespace = "default"
	// StorageClass is the class of the static PersistentVolumes; nothing provisions it.
	StorageClass = "sim-static"
	// VolumeClaimName is the volumeClaimTemplate of DeployStatefulSet: claims are data-<pod>.
	VolumeClaimName = "data"
	pauseImage      = "registry.k8s.io/pause:3.10"
	// deployTimeout applies when the caller's context has no deadline.
	deployTimeout = 3 * time.Minute
)

// DeployStatefulSet creates a StatefulSet of replicas pods, each with a read-write-once CSI
// volume from a static PersistentVolume pre-bound to its claim, and waits until all are
// Running and Ready. The real PV controller binds the claims, the real scheduler places the
// pods and the simulated kubelets attach the volumes.
func (c *Cluster) DeployStatefulSet(ctx context.Context, name string, replicas int) error {
	return c.deployStatefulSet(ctx, name, replicas, false)
}

// deployStatefulSet is DeployStatefulSet and, with spread, DeploySpreadStatefulSet: the
// two differ only in the pods' anti-affinity and in starting them all at once.
func (c *Cluster) deployStatefulSet(ctx context.Context, name string, replicas int, spread bool) error {
	ctx, cancel := withDefaultTimeout(ctx, deployTimeout)
	defer cancel()
	if err := c.ensureStorageClass(ctx); err != nil {
		return err
	}
	for i := range replicas {
		claim := fmt.Sprintf("%s-%s-%d", VolumeClaimName, name, i)
		if err := c.createPV(ctx, PVName(name, i), claim); err != nil {
			return err
		}
	}
	labels := map[string]string{"app": name}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: labels},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: labels,
			Ports: []corev1.ServicePort{{Name: "web", Port: 80}}},
	}
	if _, err := c.Client.CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil &&
		!apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service %s: %w", name, err)
	}
	n := int32(replicas)
	sc := StorageClass
	pod := podTemplate(labels)
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: VolumeClaimName, MountPath: "/data"}}
	if spread {
		pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
				TopologyKey:   "kubernetes.io/hostname",
			}},
		}}
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &n, ServiceName: name, Template: pod,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: VolumeClaimName},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: &sc,
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
	if spread {
		// Parallel: 20 pods start together instead of one after another.
		sts.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	}
	if _, err := c.Client.AppsV1().StatefulSets(Namespace).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create statefulset %s: %w", name, err)
	}
	return c.WaitPodsRunning(ctx, name, replicas)
}

// Deploy creates a Deployment of replicas stateless pods and waits until all are Running.
func (c *Cluster) Deploy(ctx context.Context, name string, replicas int) error {
	ctx, cancel := withDefaultTimeout(ctx, deployTimeout)
	defer cancel()
	n := int32(replicas)
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: &n, Template: podTemplate(labels),
			Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	if _, err := c.Client.AppsV1().Deployments(Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create deployment %s: %w", name, err)
	}
	return c.WaitPodsRunning(ctx, name, replicas)
}

// PVName is the static PersistentVolume DeployStatefulSet creates for ordinal i of name.
func PVName(name string, i int) string { return fmt.Sprintf("pv-%s-%d", name, i) }

// WaitPodsRunning polls until exactly replicas pods labelled app=name exist, none is
// terminating and all are Running and Ready, or ctx ends.
func (c *Cluster) WaitPodsRunning(ctx context.Context, name string, replicas int) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err == nil {
			ready := 0
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning &&
					podCondition(&p, corev1.PodReady) == corev1.ConditionTrue {
					ready++
				}
			}
			if ready == replicas && len(pods.Items) == replicas {
				return nil
			}
			last = fmt.Sprintf("%d of %d pods, %d ready", len(pods.Items), replicas, ready)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s pods running (%s): %w", name, last, ctx.Err())
		case <-tick.C:
		}
	}
}

func (c *Cluster) ensureStorageClass(ctx context.Context) error {
	immediate := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClass},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: &immediate,
	}
	_, err := c.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create storage class: %w", err)
	}
	return nil
}

// createPV makes a static RWO CSI volume reserved for claim through claimRef, so each
// StatefulSet ordinal always gets the same volume, as with a real pre-provisioned disk.
func (c *Cluster) createPV(ctx context.Context, name, claim string) error {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              StorageClass,
			ClaimRef:                      &corev1.ObjectReference{Namespace: Namespace, Name: claim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: CSIDriver, VolumeHandle: name, FSType: "ext4"}},
		},
	}
	_, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create persistent volume %s: %w", name, err)
	}
	return nil
}

func podTemplate(labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: pauseImage,
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
		}}},
	}
}

func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// GuardWithPDB adds a PodDisruptionBudget with minAvailable for the pods labelled
// app=name, and waits until kube-controller-manager's disruption controller reports that
// it allows no disruption.
func (c *Cluster) GuardWithPDB(ctx context.Context, name string, minAvailable int) error {
	ctx, cancel := withDefaultTimeout(ctx, deployTimeout)
	defer cancel()
	ma := intstr.FromInt32(int32(minAvailable))
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &ma,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}}}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(Namespace).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PodDisruptionBudget %s: %w", name, err)
	}
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.PolicyV1().PodDisruptionBudgets(Namespace).Get(ctx, name, metav1.GetOptions{})
		return err == nil && int(p.Status.CurrentHealthy) == minAvailable && p.Status.DisruptionsAllowed == 0, nil
	})
	if err != nil {
		return fmt.Errorf("PodDisruptionBudget %s never reported 0 disruptions allowed: %w", name, err)
	}
	return nil
}
