package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/netfence"
)

const (
	testCSIDriver  = "fence.test.kubefence.io"
	storageAgent   = "storage"
	storageSecret  = "storage-credentials"
	storageCluster = "sim-cluster"
)

// storageIP is the storage network address a NetworkFence test gives node-N.
func storageIP(i int) string { return fmt.Sprintf("10.77.0.%d", i) }

// TestNetworkFenceWithCSIAddons: kubefence fences a crashed node at one level with both
// its BMC and a csi-addons NetworkFence (mode all), through the real csi-addons
// controller and a test CSI driver that keeps a blocklist. The driver's blocklist holds
// the node's storage address before an independent watch sees anything of the node
// released; no other node's address is ever blocked. After the power cycle, and only
// after the node's new boot, the address is unblocked and kubefence's NetworkFence is
// gone.
func TestNetworkFenceWithCSIAddons(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := fastHarnessWith(t, ctx, HarnessOptions{
		Cluster: func(o *Options) {
			for i := range o.Nodes {
				o.Nodes[i].ExternalIP = storageIP(i + 1)
			}
		},
		Config: func(cfg *v1alpha1.Config) {
			cfg.Agents = append(cfg.Agents, v1alpha1.Agent{Name: storageAgent, Timeout: metav1.Duration{Duration: time.Minute},
				NetworkFence: &v1alpha1.NetworkFence{Driver: testCSIDriver, Parameters: map[string]string{"clusterID": storageCluster},
					Secret: &v1alpha1.SecretRef{Namespace: ControllerNamespace, Name: storageSecret}, AddressTypes: []string{v1alpha1.AddressExternalIP}}})
			cfg.Policies[0].Levels[0].Agents = append(cfg.Policies[0].Levels[0].Agents, storageAgent)
			cfg.Policies[0].Levels[0].Mode = v1alpha1.ModeAll
			cfg.Policies[0].Levels[0].Timeout = metav1.Duration{Duration: 2 * time.Minute}
		},
	})
	c := h.Cluster
	addons, err := StartCSIAddons(ctx, c, t.TempDir(), testCSIDriver, "clusterID")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = addons.Stop() })
	rec := startRecorder(t, ctx, c)
	victim := deployWeb(t, ctx, c)
	var index int
	if _, err := fmt.Sscanf(victim, "node-%d", &index); err != nil {
		t.Fatal(err)
	}
	cidr := storageIP(index) + "/32"
	startLeader(t, ctx, h, "controller")

	c.Node(victim).Crash()
	nf := waitReleased(t, ctx, h, victim)
	blocked, ok := addons.Driver.Blocked()[cidr]
	if !ok {
		t.Fatalf("released, but the driver's blocklist %v does not hold %s", addons.Driver.Blocked(), cidr)
	}
	for _, kind := range []string{SeenPodDisruptionTarget, SeenPodDeleted, SeenTaintAdded, SeenVADeleted} {
		if s, ok := rec.First(kind, victim); ok && !s.At.After(blocked) {
			t.Errorf("%s of %s seen at %s, before the driver blocked %s at %s", kind, victim, s.At.Format(time.RFC3339Nano), cidr, blocked.Format(time.RFC3339Nano))
		}
	}
	if s, ok := rec.First(SeenPodDisruptionTarget, victim); ok {
		t.Logf("the driver blocked %s at %s; the first release of %s seen %s later", cidr, blocked.Format(time.RFC3339Nano), victim, s.At.Sub(blocked))
	}
	if got := addons.Driver.Blocked(); len(got) != 1 {
		t.Errorf("blocklist %v, want only %s: another node's storage access was cut", got, cidr)
	}
	ops := addons.Driver.Ops()
	if len(ops) == 0 || ops[0].Parameters["clusterID"] != storageCluster || ops[0].SecretName != storageSecret || ops[0].SecretNamespace != ControllerNamespace {
		t.Errorf("the driver's calls %+v, want the configured parameters and Secret reference", ops)
	}
	verified := map[string]bool{}
	for _, a := range nf.Status.Attempts {
		if a.State == v1alpha1.AttemptVerified {
			verified[a.Agent] = true
		}
		if a.Agent == storageAgent && a.State == v1alpha1.AttemptVerified && !strings.Contains(a.Evidence, "csi-addons result Succeeded") {
			t.Errorf("the NetworkFence attempt's evidence %q does not quote csi-addons' result", a.Evidence)
		}
	}
	if !verified[ipmiAgent] || !verified[storageAgent] {
		t.Errorf("verified attempts %v, want both %s and %s (mode all)", verified, ipmiAgent, storageAgent)
	}

	switchedOn := time.Now()
	powerOn(t, ctx, h, victim)
	if final, err := waitOnlyIncident(ctx, h, victim, recovered); err != nil {
		t.Fatalf("incident not recovered after the power cycle: phase %s: %v", final.Status.Phase, err)
	}
	if got := addons.Driver.Blocked(); len(got) != 0 {
		t.Errorf("blocklist %v after recovery, want empty", got)
	}
	var unfenced time.Time
	for _, op := range addons.Driver.Ops() {
		if op.Method == "UnFenceClusterNetwork" {
			unfenced = op.At
		}
	}
	t.Logf("switched on at %s; the driver unfenced %s later", switchedOn.Format(time.RFC3339Nano), unfenced.Sub(switchedOn))
	if !unfenced.After(switchedOn) {
		t.Errorf("the driver unfenced at %s, before the node was switched on again at %s", unfenced.Format(time.RFC3339Nano), switchedOn.Format(time.RFC3339Nano))
	}
	checkNoNetworkFences(t, ctx, c)
}

// checkNoNetworkFences waits until kubefence's NetworkFences are gone (csi-addons
// removes its finalizer after kubefence's delete).
func checkNoNetworkFences(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	dyn, err := dynamicClient(c)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := dyn.Resource(netfence.Resource).List(ctx, metav1.ListOptions{LabelSelector: netfence.ManagedByLabel + "=" + netfence.ManagedBy})
		if err != nil {
			return false, nil
		}
		left = left[:0]
		for _, o := range list.Items {
			left = append(left, o.GetName())
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("kubefence's NetworkFences %v still there after recovery: %v", left, err)
	}
}
