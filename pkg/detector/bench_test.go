package detector

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

const (
	benchNodes = 5000
	benchPods  = 50000
)

// managedFields is a realistic server-side-apply record: every object decoded from the
// API server carries a few of these, and they are often its largest part.
func managedFields(i, n int) []metav1.ManagedFieldsEntry {
	out := make([]metav1.ManagedFieldsEntry, n)
	for k := range out {
		raw := fmt.Sprintf(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app-%d\"}":`+
			`{".":{},"f:image":{},"f:name":{},"f:ports":{},"f:resources":{"f:limits":{},"f:requests":{}}}}},"f:status":%s}`,
			i, strings.Repeat(`{"f:conditions":{},"f:phase":{}}`, 8))
		out[k] = metav1.ManagedFieldsEntry{Manager: fmt.Sprintf("manager-%d", k), Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)}}
	}
	return out
}

func benchNode(i int) *corev1.Node {
	name := fmt.Sprintf("node-%05d", i)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("uid-node-%d", i)),
		ResourceVersion: fmt.Sprint(1000 + i), ManagedFields: managedFields(i, 3),
		Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3), "topology.kubernetes.io/region": "region-1",
			"node.kubernetes.io/instance-type": "m5.2xlarge", "pool": fmt.Sprintf("pool-%d", i%20)},
		Annotations: map[string]string{"fencing.kubefence.io/bmc": fmt.Sprintf("10.2.%d.%d", i/250, i%250),
			"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
		Spec: corev1.NodeSpec{ProviderID: fmt.Sprintf("aws:///zone-%d/i-%017x", i%3, i)}}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	n.Status.Capacity, n.Status.Allocatable = res, res.DeepCopy()
	for _, t := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse,
			Reason: "KubeletHasSufficient" + string(t), Message: "kubelet has sufficient " + string(t),
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()})
	}
	n.Status.Conditions[0].Status = corev1.ConditionTrue
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.%d.%d", i/250, i%250)},
		{Type: corev1.NodeHostName, Address: name}}
	n.Status.NodeInfo = corev1.NodeSystemInfo{BootID: fmt.Sprintf("boot-%d", i), MachineID: fmt.Sprintf("machine-%d", i),
		KernelVersion: "6.1.0", OSImage: "Debian GNU/Linux 13", ContainerRuntimeVersion: "containerd://2.1.0", KubeletVersion: "v1.36.3"}
	for k := range 20 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{SizeBytes: 1 << 26, Names: []string{
			fmt.Sprintf("registry.example.com/team-%d/image-%d@sha256:%064x", k, k, i*100+k),
			fmt.Sprintf("registry.example.com/team-%d/image-%d:v1.%d", k, k, i%7)}})
	}
	return n
}

func benchPod(i int) *corev1.Pod {
	ns, name := fmt.Sprintf("team-%d", i%50), fmt.Sprintf("app-%d-%05d", i%400, i)
	yes, tol := true, int64(300)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("uid-pod-%d", i)),
		ResourceVersion: fmt.Sprint(100000 + i), ManagedFields: managedFields(i, 2),
		Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%400), "pod-template-hash": fmt.Sprintf("%x", i%4000)},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet",
			Name: fmt.Sprintf("app-%d-%x", i%400, i%4000), UID: types.UID(fmt.Sprintf("uid-rs-%d", i%4000)), Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%05d", i%benchNodes), ServiceAccountName: "default",
			Containers: []corev1.Container{{Name: fmt.Sprintf("app-%d", i%400), Image: fmt.Sprintf("registry.example.com/app-%d:v1", i%400),
				Env:          []corev1.EnvVar{{Name: "POD_NAME", Value: name}, {Name: "MODE", Value: "production"}},
				Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-" + name}}}},
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tol},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tol}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.%d.%d.%d", 100+i/65536, i/256%256, i%256),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: fmt.Sprintf("app-%d", i%400), Ready: true,
				ImageID: fmt.Sprintf("registry.example.com/app-%d@sha256:%064x", i%400, i), ContainerID: fmt.Sprintf("containerd://%064x", i)}}}}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkDetectorMemory fills informer stores (client-go cache indexers, as the
// controller's informers hold them) with 5,000 nodes, their Leases and 50,000 pods
// indexed by node, feeds the detector and reports the heap in use after GC, with the
// objects as decoded and trimmed by TrimForCache. Each op assesses one node and lists
// its pods.
func BenchmarkDetectorMemory(b *testing.B) {
	b.Run("raw", func(b *testing.B) { benchMemory(b, func(o any) any { return o }) })
	b.Run("trimmed", func(b *testing.B) {
		benchMemory(b, func(o any) any { o, _ = TrimForCache(o); return o })
	})
}

func benchMemory(b *testing.B, transform func(any) any) {
	before := heapInUse()
	byNode := cache.Indexers{"node": func(obj any) ([]string, error) { return []string{obj.(*corev1.Pod).Spec.NodeName}, nil }}
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	leases := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, byNode)
	d := New(Thresholds{LeaseStaleAfter: 30 * time.Second, NotReadyAfter: 30 * time.Second, FlapWindow: 10 * time.Minute, FlapThreshold: 3})
	now := time.Now()
	for i := range benchNodes {
		n := benchNode(i)
		renew := metav1.NewMicroTime(now)
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: n.Name, ManagedFields: managedFields(i, 1)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &n.Name, RenewTime: &renew}}
		must(b, nodes.Add(transform(n)))
		must(b, leases.Add(transform(l)))
		d.ObserveLease(l, now)
		d.Assess(n, now)
	}
	for i := range benchPods {
		must(b, pods.Add(transform(benchPod(i))))
	}
	inUse := heapInUse()
	all := nodes.List()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		n := all[i%len(all)].(*corev1.Node)
		if obs := d.Assess(n, now.Add(time.Second)); obs.Health != Healthy {
			b.Fatalf("%s: %s", n.Name, obs.Health)
		}
		if on, err := pods.ByIndex("node", n.Name); err != nil || len(on) != benchPods/benchNodes {
			b.Fatalf("%s: %d pods, %v", n.Name, len(on), err)
		}
		i++
	}
	// After the loop: ResetTimer clears reported metrics.
	b.ReportMetric(float64(inUse)/(1<<20), "MiB-heap-in-use")
	b.ReportMetric(float64(inUse-min(before, inUse))/(1<<20), "MiB-added")
	runtime.KeepAlive(leases)
}

func must(b *testing.B, err error) {
	if err != nil {
		b.Fatal(err)
	}
}
