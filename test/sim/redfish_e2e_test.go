package sim

import (
	"context"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestRedfishNodeFenced: in a cluster whose BMCs speak IPMI and Redfish, a node with a
// Redfish BMC falls under the Redfish policy and is powered off over Redfish (TLS
// verified against the sim's CA) before anything of it is released.
func TestRedfishNodeFenced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h := fastHarnessWith(t, ctx, HarnessOptions{RedfishNodes: 1})
	c := h.Cluster
	if err := c.DeployStatefulSet(ctx, "web", 1); err != nil {
		t.Fatal(err)
	}
	rec := startRecorder(t, ctx, c)
	startLeader(t, ctx, h, "controller")
	const victim = "node-3"
	nf := crashAndWait(t, ctx, h, victim)
	if nf.Status.Policy != "redfish" || nf.Status.Attempts[0].Agent != "redfish" {
		t.Errorf("incident under policy %s by agent %s, want the redfish policy and agent", nf.Status.Policy, nf.Status.Attempts[0].Agent)
	}
	if on, err := h.Redfish[victim].PoweredOn("1"); err != nil || on {
		t.Errorf("Redfish system of %s powered on = %t (%v), want off", victim, on, err)
	}
	power, err := h.RedfishEvents(victim)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := FirstPowerOff(power); !ok {
		t.Fatalf("Redfish BMC of %s logged no power off: %+v", victim, power)
	}
	for _, v := range CheckReleasedAfterFence(rec.All(), victim, power) {
		t.Errorf("invariant 1 violated: %s", v)
	}
	for name, b := range h.BMCs {
		ev, _ := b.Events()
		for _, v := range CheckUntouched(rec.All(), name, ev) {
			t.Errorf("%s", v)
		}
	}
	if nf.Status.Phase != v1alpha1.PhaseRemediated {
		t.Errorf("phase %s, want Remediated", nf.Status.Phase)
	}
}
