package sim

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeploySpreadStatefulSet is DeployStatefulSet with a required pod anti-affinity on the
// host name: no two pods share a node, so each failed node strands exactly one pod and a
// scenario can name a victim by the pod it runs ("@web-0").
func (c *Cluster) DeploySpreadStatefulSet(ctx context.Context, name string, replicas int) error {
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
	pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
			TopologyKey:   "kubernetes.io/hostname",
		}},
	}}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &n, ServiceName: name, Template: pod,
			// Parallel: 20 pods start together instead of one after another.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
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
	if _, err := c.Client.AppsV1().StatefulSets(Namespace).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create statefulset %s: %w", name, err)
	}
	return c.WaitPodsRunning(ctx, name, replicas)
}
