package sim

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/controller"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// instantAgent answers at once, so what remains of an incident's duration is the
// controller's own work: API reads and writes, the state machine, queueing.
type instantAgent struct{}

func (instantAgent) Agent(string) (plugin.Agent, error) { return instantAgent{}, nil }
func (instantAgent) Describe(context.Context) (plugin.Description, error) {
	return plugin.Description{Name: "instant"}, nil
}
func (instantAgent) Validate(context.Context, map[string]string) error { return nil }
func (instantAgent) Fence(context.Context, plugin.Request, plugin.Action) (plugin.Result, error) {
	return plugin.Result{State: plugin.StateOff}, nil
}
func (instantAgent) Status(context.Context, plugin.Request) (plugin.Result, error) {
	return plugin.Result{State: plugin.StateOff}, nil
}
func (instantAgent) Unfence(context.Context, plugin.Request) (plugin.Result, error) {
	return plugin.Result{State: plugin.StateOn}, nil
}

// BenchmarkIncidentOverhead: 100 nodes die at once on a real kube-apiserver; an in-process
// controller with an agent that answers instantly fences them all. Reported per incident:
// time from Detected to Remediated, i.e. the controller's overhead. Target p99 < 100ms.
//
//	go test ./test/sim -run '^$' -bench IncidentOverhead -benchtime 1x
func BenchmarkIncidentOverhead(b *testing.B) {
	for _, nodes := range []int{1, 100} {
		b.Run(fmt.Sprintf("incidents=%d", nodes), func(b *testing.B) { incidentOverhead(b, nodes) })
	}
}

func incidentOverhead(b *testing.B, nodes int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Stop()
	if err := InstallCRD(ctx, c); err != nil {
		b.Fatal(err)
	}
	var all []time.Duration
	for i := range b.N {
		all = append(all, incidentRound(b, ctx, c, fmt.Sprintf("r%d-", i), nodes)...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(all[len(all)-1].Microseconds())/1000, "max-ms")
}

func incidentRound(b *testing.B, ctx context.Context, c *Cluster, prefix string, nodes int) []time.Duration {
	for i := range nodes {
		name := fmt.Sprintf("%snode-%d", prefix, i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"bmc": name}}}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		renew := metav1.NewMicroTime(time.Now())
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: NodeLeaseNamespace},
			Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}
		if _, err := c.Client.CoordinationV1().Leases(NodeLeaseNamespace).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	all := intstr.FromString("100%")
	off := false
	cfg := &v1alpha1.Config{
		LeaderElection: v1alpha1.LeaderElection{Enabled: &off},
		Detection:      v1alpha1.Detection{LeaseStaleAfter: metav1.Duration{Duration: 2 * time.Second}},
		Agents: []v1alpha1.Agent{{Name: "instant", SHA256: fmt.Sprintf("%064d", 0),
			Target: v1alpha1.TargetSource{Annotation: "bmc"}}},
		Policies: []v1alpha1.Policy{{Name: "all", Levels: []v1alpha1.Level{{Agents: []string{"instant"}}},
			Budget: v1alpha1.Budget{MaxConcurrent: int32(nodes), MaxUnhealthy: &all}}},
	}
	cfg.Default()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		b.Fatal(err)
	}
	rc := *c.Config
	rc.QPS, rc.Burst = 500, 1000
	ctl, err := controller.New(controller.Options{Config: cfg, Client: mustClient(b, &rc), Dynamic: dyn,
		Agents: instantAgent{}, Identity: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if err := ctl.StartInformers(runCtx); err != nil {
		b.Fatal(err)
	}
	go ctl.Run(runCtx, 1)
	var out []time.Duration
	// One list per poll: a hundred lists a poll would load the API server more than the
	// controller under test does.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, c, "")
		if err != nil {
			return false, nil
		}
		out = out[:0]
		for _, nf := range incs {
			if !strings.HasPrefix(nf.Spec.NodeName, prefix) {
				continue
			}
			if nf.Status.Phase != v1alpha1.PhaseRemediated {
				return false, nil
			}
			detected, _ := stepAt(nf, "Detected")
			done, _ := stepAt(nf, "Remediated")
			out = append(out, done.Sub(detected))
		}
		return len(out) == nodes, nil
	})
	if err != nil {
		b.Fatalf("not every incident remediated: %v", err)
	}
	return out
}

func mustClient(b *testing.B, rc *rest.Config) kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}
