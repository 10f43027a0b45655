package sim

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/app"
)

// floorWrites is how many requests BenchmarkIncidentFloor sends per incident when no
// write conflicts.
const floorWrites = 6

// BenchmarkIncidentFloor: the writes an incident cannot do without, sent with no
// controller at all, to show what BenchmarkIncidentOverhead's figures are made of. For
// each of N nodes at once a goroutine creates the node's NodeFence, writes its status
// three times (fence issued, verified, remediated) and taints the node twice (fenced,
// out of service), each request after the previous one answered, in the order the
// incident's checkpoints impose. No reads, no Lease checks, no events, no pods: whatever
// a controller does, an incident with 100 at once on this API server takes at least this.
// Reported: per-incident time p50/p99/max-ms, and the requests sent per incident.
//
//	go test ./test/sim -run '^$' -bench IncidentFloor -benchtime 3x
func BenchmarkIncidentFloor(b *testing.B) {
	for _, nodes := range []int{1, 100} {
		b.Run(fmt.Sprintf("incidents=%d", nodes), func(b *testing.B) { incidentFloor(b, nodes) })
	}
}

func incidentFloor(b *testing.B, nodes int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := benchCluster(b, ctx)
	rc := *c.Config
	rc.QPS, rc.Burst = 500, 1000
	client := mustClient(b, app.Protobuf(&rc))
	dyn, err := dynamic.NewForConfig(&rc)
	if err != nil {
		b.Fatal(err)
	}
	// The first requests for a new resource wait for the API server to set up its storage
	// and watch cache: one untimed incident first, as a running controller's informers
	// would have done long before.
	warm, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "warm-up"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var ignored int
	if _, err := floorIncident(ctx, client, dyn, warm, &ignored); err != nil {
		b.Fatal(err)
	}
	var all []time.Duration
	var requests int
	for i := range b.N {
		prefix := fmt.Sprintf("f%d-", i)
		var created []*corev1.Node
		for j := range nodes {
			n, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%snode-%d", prefix, j)}},
				metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			created = append(created, n)
		}
		took := make([]time.Duration, nodes)
		errs := make([]error, nodes)
		extras := make([]int, nodes)
		var wg sync.WaitGroup
		for j, node := range created {
			wg.Go(func() { took[j], errs[j] = floorIncident(ctx, client, dyn, node, &extras[j]) })
		}
		wg.Wait()
		for j, err := range errs {
			if err != nil {
				b.Fatalf("incident %d: %v", j, err)
			}
		}
		all = append(all, took...)
		for _, e := range extras {
			requests += floorWrites + e
		}
		if err := dyn.Resource(v1alpha1.NodeFenceResource).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			b.Fatal(err)
		}
		for _, n := range created {
			if err := client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(Percentile(all, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(Percentile(all, 99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(slices.Max(all).Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(requests)/float64(len(all)), "requests/incident")
}

// floorIncident sends one incident's indispensable writes back to back and returns how
// long they took; extra counts the requests a conflict on the node added.
func floorIncident(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, node *corev1.Node, extra *int) (time.Duration, error) {
	start := time.Now()
	nf := &v1alpha1.NodeFence{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "NodeFence"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: node.Name + "-"},
		Spec:       v1alpha1.NodeFenceSpec{NodeName: node.Name, RequestedBy: "bench", Reason: "floor"},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(nf)
	if err != nil {
		return 0, err
	}
	u := &unstructured.Unstructured{Object: obj}
	res := dyn.Resource(v1alpha1.NodeFenceResource)
	if u, err = res.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	taints := []corev1.Taint{
		{Key: "fencing.kubefence.io/fenced", Value: "true", Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute},
	}
	for k, phase := range []v1alpha1.Phase{v1alpha1.PhaseFencing, v1alpha1.PhaseFenced, v1alpha1.PhaseRemediated} {
		u.Object["status"] = map[string]any{"phase": string(phase), "message": fmt.Sprintf("write %d", k+1)}
		if u, err = res.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
			return 0, fmt.Errorf("status %s: %w", phase, err)
		}
		if phase == v1alpha1.PhaseFenced {
			// Release: both taints, each after the checkpoint that records it.
			for _, t := range taints {
				// kube-controller-manager writes new nodes too: on a conflict, read the node
				// again, as the controller does.
				err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					update := node.DeepCopy()
					update.Spec.Taints = append(update.Spec.Taints, t)
					updated, err := client.CoreV1().Nodes().Update(ctx, update, metav1.UpdateOptions{})
					if err == nil {
						node = updated
						return nil
					}
					*extra++
					if n, gerr := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); gerr == nil {
						node = n
						*extra++
					}
					return err
				})
				if err != nil {
					return 0, fmt.Errorf("taint %s: %w", t.Key, err)
				}
			}
		}
	}
	return time.Since(start), nil
}
