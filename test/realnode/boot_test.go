package realnode

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestNodePowerCycle checks the harness itself: a pod runs on a real node; a crash ends
// every process of the node while its BMC still says on, and the node stays down; the
// BMC's power-off and power-on boot it again with a new boot ID, and it runs pods again.
func TestNodePowerCycle(t *testing.T) {
	c := startCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: "node-1", TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{Name: "app", Image: BusyboxImage, Command: []string{"/bin/sh", "-c", "sleep 3600"}}}}}
	}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod("before"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "pod before running", func() (bool, error) { return c.RunningPod(ctx, "default", "before") != nil, nil })
	n := c.Node("node-1")
	boot := n.BootID()
	if err := c.Crash(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if pids := n.Processes(); len(pids) != 0 {
		var desc []string
		for _, p := range pids {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
			desc = append(desc, fmt.Sprintf("%d %q %s", p, cmd, st))
		}
		t.Fatalf("node-1 crashed but processes live on in its cgroup:\n%s", strings.Join(desc, "\n"))
	}
	if on, err := c.BMC("node-1").PoweredOn(); err != nil || !on {
		t.Fatalf("the BMC of a crashed node says on=%v (%v); want on", on, err)
	}
	if n.Running() {
		t.Fatal("node-1 is running after its crash")
	}
	if err := c.BMC("node-1").SetPower(false); err != nil {
		t.Fatal(err)
	}
	if err := c.BMC("node-1").SetPower(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "node-1 back with a new boot ID", func() (bool, error) {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
		return err == nil && nodeReady(node) && node.Status.NodeInfo.BootID == n.BootID() && n.BootID() != boot, nil
	})
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod("after"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "pod after running", func() (bool, error) { return c.RunningPod(ctx, "default", "after") != nil, nil })
}
