package sim

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/app"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
)

// BenchmarkIncidentCreate measures what the API server and etcd spend on creating an
// incident with the status the controller keeps for it (which the API server drops: the
// status subresource) and without it, as the controller sends it. Each round creates 500
// incidents each way, 16 at a time, in turn; the ratio is of the CPU both used over all
// rounds.
func BenchmarkIncidentCreate(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c := benchCluster(b, ctx)
	rc := *c.Config
	rc.QPS, rc.Burst = app.DefaultQPS, app.DefaultBurst
	fencing, err := versioned.NewForConfig(&rc)
	if err != nil {
		b.Fatal(err)
	}
	const creates = 500
	var with, without time.Duration
	round := func(i int, status bool) error {
		start := c.ProcessCPU()
		err := forEach(ctx, creates, func(ctx context.Context, j int) error {
			_, err := fencing.FencingV1alpha1().NodeFences().Create(ctx, detectedIncident(fmt.Sprintf("c%d-%v-node-%d", i, status, j), status),
				metav1.CreateOptions{})
			return err
		})
		end := c.ProcessCPU()
		used := end["kube-apiserver"] - start["kube-apiserver"] + end["etcd"] - start["etcd"]
		if status {
			with += used
		} else {
			without += used
		}
		if err != nil {
			return err
		}
		return fencing.FencingV1alpha1().NodeFences().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	}
	// One untimed round each way first: the API server sets up the resource's storage.
	for _, status := range []bool{true, false} {
		if err := round(-1, status); err != nil {
			b.Fatal(err)
		}
	}
	with, without = 0, 0
	b.ResetTimer()
	for i := range b.N {
		for _, status := range []bool{i%2 == 0, i%2 != 0} {
			if err := round(i, status); err != nil {
				b.Fatal(err)
			}
		}
	}
	n := float64(b.N * creates)
	b.ReportMetric(float64(with.Microseconds())/n, "with-status-apiserver+etcd-cpu-us/create")
	b.ReportMetric(float64(without.Microseconds())/n, "without-apiserver+etcd-cpu-us/create")
	b.ReportMetric(float64(without)/float64(with), "ratio")
}

// detectedIncident is an incident as the controller opens one for a node whose Lease
// went stale, with the status it keeps for the first decision when status is set.
func detectedIncident(node string, status bool) *v1alpha1.NodeFence {
	renewed := time.Now().Add(-2 * time.Second)
	evidence := fmt.Sprintf("lease last renewed at %s (seen 2.002s ago, threshold 2s, evidence floor 2s)", renewed.UTC().Format(time.RFC3339Nano))
	nf := &v1alpha1.NodeFence{
		ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-", Labels: map[string]string{v1alpha1.NodeLabel: v1alpha1.LabelValue(node)}},
		Spec: v1alpha1.NodeFenceSpec{NodeName: node, RequestedBy: v1alpha1.RequestedByController,
			Reason: "node unhealthy: " + evidence},
	}
	if status {
		rt := metav1.NewMicroTime(renewed)
		nf.Status = v1alpha1.NodeFenceStatus{Phase: v1alpha1.PhasePending, Policy: "all", LeaseRenewTime: &rt,
			Timeline: []v1alpha1.Step{
				{Time: rt, Type: v1alpha1.StepEvidenceStarted, Message: evidence},
				{Time: metav1.NewMicroTime(time.Now()), Type: v1alpha1.StepDetected, Message: "unhealthy for longer than the threshold: " + evidence},
			}}
	}
	return nf
}
