package sim

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/retry"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/app"
	"github.com/kubefence/kubefence/pkg/podrelease"
)

// floorWrites is how many requests the floor sends per incident when no write conflicts.
const floorWrites = 5

// floor sends, for BenchmarkIncidentCost, the writes an incident cannot do without, with
// no controller at all. For each of N nodes at once a goroutine creates the node's
// NodeFence, writes its status (fence issued), taints the node twice (fenced, out of
// service; each update names the incident as the taint's owner, as the controller's do)
// and writes its status again (remediated), each request after the previous one
// answered, in the order the incident's checkpoints impose. No reads, no Lease checks, no
// events, no pods: whatever a controller does, an incident with N at once on this API
// server takes at least this. Its clock stops where the controller's does: when the last
// taint is on the node (the controller's Remediated step is taken then, before the write
// that records it), so the last status write loads the API server but is not timed.
type floor struct {
	client  kubernetes.Interface
	dyn     dynamic.Interface
	counter *requestCounter
	cluster *Cluster
	// cpu is what the last round's incidents cost each process.
	cpu cpuUse
}

func newFloor(ctx context.Context, c *Cluster) (*floor, error) {
	rc := *c.Config
	rc.QPS, rc.Burst = float32(envInt("KUBEFENCE_BENCH_QPS", app.DefaultQPS)), envInt("KUBEFENCE_BENCH_BURST", app.DefaultBurst)
	// One rate limiter for both clients, as the controller has one for all its requests.
	rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst)
	counter := &requestCounter{counts: map[string]int{}}
	rc.Wrap(counter.wrap)
	client, err := kubernetes.NewForConfig(app.Protobuf(&rc))
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(&rc)
	if err != nil {
		return nil, err
	}
	f := &floor{client: client, dyn: dyn, counter: counter, cluster: c}
	// The first requests for a new resource wait for the API server to set up its storage
	// and watch cache: one untimed incident first, as a running controller's informers
	// would have done long before.
	if _, _, err := f.round(ctx, "warm-up-", 1, nil, false); err != nil {
		return nil, fmt.Errorf("floor warm-up: %w", err)
	}
	counter.reset()
	return f, nil
}

// round runs nodes incidents at once and returns how long each took to release its node
// and how many requests they sent in all. With a record (recordWrites), each incident's
// two status writes carry it instead of a phase and a message. With yield, each
// incident's last status write waits until every incident of the round released its
// node, as a storm's records wait for its releases in the controller (releaseGate).
func (f *floor) round(ctx context.Context, prefix string, nodes int, record []map[string]any, yield bool) ([]time.Duration, int, error) {
	created := make([]*corev1.Node, nodes)
	err := forEach(ctx, nodes, func(ctx context.Context, j int) error {
		n, err := f.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%snode-%d", prefix, j)}},
			metav1.CreateOptions{})
		created[j] = n
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	took := make([]time.Duration, nodes)
	errs := make([]error, nodes)
	extras := make([]int, nodes)
	var wg sync.WaitGroup
	var released *sync.WaitGroup
	if yield {
		released = &sync.WaitGroup{}
		released.Add(nodes)
	}
	sampler := sampleCPU(f.cluster)
	start := time.Now()
	for j, node := range created {
		wg.Go(func() { took[j], errs[j] = floorIncident(ctx, f.client, f.dyn, node, record, released, &extras[j]) })
	}
	wg.Wait()
	// Up to the last release, as the controller's round is measured up to its last
	// Remediated step.
	f.cpu = sampler.between(start, start.Add(slices.Max(took)))
	requests := 0
	for j, err := range errs {
		if err != nil {
			return nil, 0, fmt.Errorf("floor incident %d: %w", j, err)
		}
		requests += floorWrites + extras[j]
	}
	if err := f.dyn.Resource(v1alpha1.NodeFenceResource).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return nil, 0, err
	}
	err = forEach(ctx, nodes, func(ctx context.Context, j int) error {
		return f.client.CoreV1().Nodes().Delete(ctx, created[j].Name, metav1.DeleteOptions{})
	})
	return took, requests, err
}

// floorIncident sends one incident's indispensable writes back to back and returns how
// long they took up to the release (the last taint); extra counts the requests a
// conflict on the node added. record, when given, is what its two status writes carry;
// pending, when given, counts the round's incidents not released yet, and the last
// status write waits for none to be left.
func floorIncident(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, node *corev1.Node, record []map[string]any,
	pending *sync.WaitGroup, extra *int) (time.Duration, error) {
	start := time.Now()
	release := func() {}
	if pending != nil {
		// Once, whether this incident released its node or failed on the way.
		release = sync.OnceFunc(pending.Done)
		defer release()
	}
	var released time.Duration
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
	for k, phase := range []v1alpha1.Phase{v1alpha1.PhaseFencing, v1alpha1.PhaseRemediated} {
		if phase == v1alpha1.PhaseRemediated && pending != nil {
			release()
			pending.Wait()
		}
		u.Object["status"] = map[string]any{"phase": string(phase), "message": fmt.Sprintf("write %d", k+1)}
		if record != nil {
			u.Object["status"] = runtime.DeepCopyJSONValue(record[k])
		}
		if u, err = res.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
			return 0, fmt.Errorf("status %s: %w", phase, err)
		}
		if phase == v1alpha1.PhaseFencing {
			// The fence, verified at once; then the release: both taints, each with its
			// owner on the node in the same update.
			var owned []string
			for _, t := range taints {
				owned = append(owned, t.Key)
				// kube-controller-manager writes new nodes too: on a conflict, read the node
				// again, as the controller does.
				err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					update := node.DeepCopy()
					update.Spec.Taints = append(update.Spec.Taints, t)
					if update.Annotations == nil {
						update.Annotations = map[string]string{}
					}
					update.Annotations[podrelease.OwnerAnnotation] = podrelease.OwnerMark(u.GetName(), owned)
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
			released = time.Since(start)
		}
	}
	return released, nil
}

// recordWrites returns what the controller's two status writes of an incident carried,
// as its final status tells: the write ahead of the agent call (phase Fencing, the steps
// up to the first AgentCalled, the first attempt issued and nothing verified or
// released) and the final one. The floor writes them to measure what the record costs
// the API server apart from what the controller does.
func recordWrites(final v1alpha1.NodeFenceStatus) ([]map[string]any, error) {
	ahead := *final.DeepCopy()
	ahead.Phase, ahead.VerifiedLevel, ahead.Remediation = v1alpha1.PhaseFencing, 0, v1alpha1.Remediation{}
	if i := slices.IndexFunc(ahead.Timeline, func(st v1alpha1.Step) bool { return st.Type == v1alpha1.StepAgentCalled }); i >= 0 {
		ahead.Timeline = ahead.Timeline[:i+1]
	}
	if len(ahead.Attempts) > 0 {
		a := ahead.Attempts[0]
		a.State, a.Finished, a.PowerState = v1alpha1.AttemptFencing, nil, ""
		ahead.Attempts = []v1alpha1.Attempt{a}
	}
	var out []map[string]any
	for _, st := range []v1alpha1.NodeFenceStatus{ahead, final} {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}
