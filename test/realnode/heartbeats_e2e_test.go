package realnode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubefence/kubefence/test/sim"
)

// heartbeatValues are the chart values of a cluster with node agents and heartbeats (the
// heartbeats profile of make bench-realnode), with every kubelet checked each second.
const heartbeatValues = `config:
  detection: {leaseStaleAfter: 10s, notReadyAfter: 10s}
controller:
  identityRenewInterval: 500ms
nodeAgent:
  enabled: true
  bootIDFile: /proc/sys/kernel/random/boot_id
  peers:
    enabled: true
    keySecret: kubefence-peer-key
    probeInterval: 200ms
heartbeats:
  enabled: true
  kubeletTimeout: 500ms
  kubeletCheckInterval: 1s
`

// TestHeartbeatsOnRealNodes: on three real nodes whose kubelets renew their Lease every
// 2s, with the node agents answering each other and the controller's seat among them, a
// node that dies (every process at once, its BMC still on) is judged on heartbeats (its
// agent gone, its kubelet silent, its Lease silent for one and a half renewal periods),
// not on the 10s Lease threshold, and its BMC powers it off.
//
// Each replica checks every kubelet each second here, so a routine check of the dead
// node's kubelet almost always falls in the second between its death and its agent
// being declared gone by its peers. Before such a check was asked again, its silence,
// seen while the agent still counted as present, made the kubelet's silence count for
// nothing, and the node waited for the Lease threshold (a heartbeats run of make
// bench-realnode did, once in five).
func TestHeartbeatsOnRealNodes(t *testing.T) {
	c := startCluster(t, 3, func(o *Options) { o.LeaseDuration, o.StatusUpdate = 8*time.Second, 2*time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := c.CreatePeerKey(ctx, "kubefence-peer-key"); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(t.TempDir(), "heartbeats.yaml")
	if err := os.WriteFile(values, []byte(heartbeatValues), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Install(ctx, values); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	leader := leaderNode(t, ctx, c)
	waitFor(t, ctx, "the node agents running on every node", func() (bool, error) {
		ds, err := c.Client.AppsV1().DaemonSets(Namespace).Get(ctx, Fullname+"-node-agent", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return ds.Status.DesiredNumberScheduled == 3 && ds.Status.NumberReady == 3, nil
	})
	victim := ""
	for _, n := range c.Nodes() {
		if n.Name != leader {
			victim = n.Name
			break
		}
	}
	// Two renewals seen: the leader has measured the node's cadence, which heartbeat
	// evidence needs (its floor is one and a half renewal gaps).
	if err := sim.WaitLeaseRenewals(ctx, c.Client, victim); err != nil {
		t.Fatal(err)
	}
	died := time.Now()
	if err := c.Crash(ctx, victim); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s died (the leader on %s)", victim, leader)
	var nf *unstructured.Unstructured
	waitFor(t, ctx, "an incident for "+victim, func() (bool, error) {
		nfs, err := c.NodeFences(ctx, victim)
		if err != nil || len(nfs) == 0 {
			return false, nil
		}
		nf = &nfs[0]
		return true, nil
	})
	reason, _, _ := unstructured.NestedString(nf.Object, "spec", "reason")
	if !strings.Contains(reason, "agent gone from its peers") || !strings.Contains(reason, "kubelet gave no answer") {
		t.Fatalf("incident %s opened on %q; want the heartbeat evidence (its agent gone, its kubelet silent), not the Lease threshold", nf.GetName(), reason)
	}
	var off time.Time
	waitFor(t, ctx, victim+"'s BMC powering it off", func() (bool, error) {
		var err error
		off, err = powerOffAfter(c.BMC(victim), died)
		return err == nil, nil
	})
	t.Logf("incident %s: %s; the BMC cut power %s after the failure", nf.GetName(), reason, off.Sub(died).Round(100*time.Millisecond))
}
