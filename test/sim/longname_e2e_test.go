package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/test/sim/bmc"
)

// A node name may be a DNS subdomain of up to 253 characters (a cloud provider's FQDN,
// say), while a label value holds 63 at most. These tests give node-1 a name of 91
// characters; its BMC stays h.BMCs["node-1"].

// longNamedHarness starts a 2-node harness whose first node is named with fill, returns
// it and that name, and starts the leader with leaderArgs.
func longNamedHarness(t *testing.T, ctx context.Context, fill string, leaderArgs ...string) (*Harness, string) {
	t.Helper()
	long := "node-1." + strings.Repeat(fill, 60) + ".rack-7.example.internal"
	h := fastHarnessWith(t, ctx, HarnessOptions{Nodes: 2, Cluster: func(o *Options) { o.Nodes[0].Name = long }})
	startLeader(t, ctx, h, "controller-1", leaderArgs...)
	return h, long
}

// awaitIncident polls node's latest incident until done says it is there, or fails.
func awaitIncident(ctx context.Context, c *Cluster, node string, done func(v1alpha1.NodeFence) (bool, error)) (v1alpha1.NodeFence, error) {
	var last v1alpha1.NodeFence
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		incs, err := Incidents(ctx, c, node)
		if err != nil || len(incs) == 0 {
			return false, nil
		}
		last = incs[len(incs)-1]
		return done(last)
	})
	if err != nil {
		err = fmt.Errorf("last incident %s %q %q: %w", last.Name, last.Status.Phase, last.Status.Message, err)
	}
	return last, err
}

// TestLongNodeNameFenced: a dead node whose name is longer than a label value is fenced
// and released like any other: its incident is created (its node label shortened with a
// hash), its BMC powers it off, and the incident ends Remediated.
func TestLongNodeNameFenced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h, long := longNamedHarness(t, ctx, "a")
	h.Cluster.Node(long).Crash()
	t.Logf("crashed %s (%d characters; kubelet stopped, BMC on)", long, len(long))

	last, err := awaitIncident(ctx, h.Cluster, long, func(nf v1alpha1.NodeFence) (bool, error) {
		return nf.Status.Phase == v1alpha1.PhaseRemediated, nil
	})
	if err != nil {
		t.Fatalf("no Remediated incident for %s: %v", long, err)
	}
	if got, want := last.Labels[v1alpha1.NodeLabel], v1alpha1.LabelValue(long); got != want || len(got) > 63 {
		t.Errorf("incident %s labelled %s=%q, want %q (at most 63 characters)", last.Name, v1alpha1.NodeLabel, got, want)
	}
	power, err := h.BMCs["node-1"].Events()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := FirstPowerOff(power); !ok {
		t.Fatalf("the BMC of %s never logged a power off: %+v", long, power)
	}
	if on, err := h.BMCs["node-1"].PoweredOn(); err != nil || on {
		t.Errorf("BMC of %s: powered on = %t (%v), want off", long, on, err)
	}
}

// TestLongNamedNodeWithAReplicaHeld: a node that runs a live controller replica is never
// fenced, whatever its kubelet does (the replica's identity Lease, renewing, says it is
// alive). On a node whose name is longer than a label value, the replica's identity
// Lease carries the whole name in an annotation and a shortened label; the leader holds
// the fence of that node when its kubelet stops, and its BMC is asked for nothing. The
// node agent's report Lease of such a node is accepted too, and names its node whole.
func TestLongNamedNodeWithAReplicaHeld(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h, long := longNamedHarness(t, ctx, "b", "--node-name", "node-2")
	c := h.Cluster
	if _, err := h.StartController("controller-2", "--node-name", long); err != nil {
		t.Fatal(err)
	}
	c.Node(long).Crash()
	t.Logf("crashed the kubelet of %s (%d characters), where controller-2 runs", long, len(long))

	last, err := awaitIncident(ctx, c, long, func(nf v1alpha1.NodeFence) (bool, error) {
		if p := nf.Status.Phase; p == v1alpha1.PhaseFencing || p == v1alpha1.PhaseRemediated {
			return false, fmt.Errorf("incident %s went %s", nf.Name, p)
		}
		return nf.Status.Phase == v1alpha1.PhaseHeld && strings.Contains(nf.Status.Message, "runs a live kubefence controller replica"), nil
	})
	if err != nil {
		t.Fatalf("the fence of %s was not held for its live replica: %v", long, err)
	}
	t.Logf("incident %s held: %s", last.Name, last.Status.Message)
	power, err := h.BMCs["node-1"].Events()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range power {
		if e.Action != bmc.ActionOn {
			t.Errorf("the BMC of %s was asked to %s at %s", long, e.Action, e.Time.Format(time.RFC3339Nano))
		}
	}

	var report coordinationv1.Lease
	report.Name, report.Namespace = nodeagent.LeaseName(long), ControllerNamespace
	if err := (nodeagent.Report{}).Encode(&report, long); err != nil {
		t.Fatal(err)
	}
	created, err := c.Client.CoordinationV1().Leases(ControllerNamespace).Create(ctx, &report, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the report Lease of %s: %v", long, err)
	}
	if got := nodeagent.NodeOf(created); got != long {
		t.Errorf("the report Lease of %s names node %q", long, got)
	}
}
