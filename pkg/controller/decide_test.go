package controller

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/policy"
)

// TestReplicaHoldsWhateverThePolicy: a held incident of a node relabelled out of every
// policy is decided under the policy it recorded, and a live controller replica on the
// node still holds its fence: that node is alive, whatever its labels say.
func TestReplicaHoldsWhateverThePolicy(t *testing.T) {
	cfg := fixtureConfig()
	cfg.Policies[0].NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}
	nf := fencedIncident(v1alpha1.PhaseHeld, "")
	nf.Status.Message = "held for a while"
	objs := threeNodes()
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok {
			n.Labels = map[string]string{"pool": "a"}
		}
	}
	f := newFixture(t, cfg, append(objs, nf)...)
	// node-1 is relabelled out of the policy; a replica runs on it, renewing.
	n := fixtureNode("node-1", "boot-node-1", false)
	f.cache(n)
	f.now = f0.Add(time.Minute)
	f.renewAllBut("node-1")
	f.c.onIdentityLease(identityLease("replica-b", "node-1", f.now))
	f.sync("node-1")
	f.expectCalls()
	got := f.incident("node-1")
	if got.Status.Phase != v1alpha1.PhaseHeld || len(got.Status.Attempts) > 0 {
		t.Fatalf("phase %s with %d attempts, want Held with none", got.Status.Phase, len(got.Status.Attempts))
	}
	if holds := stepsOf(got, v1alpha1.StepHold); len(holds) == 0 || !strings.Contains(holds[len(holds)-1], policy.ReasonControllerHere) {
		t.Errorf("hold steps %q, want the last one for %s", holds, policy.ReasonControllerHere)
	}
}

