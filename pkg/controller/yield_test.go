package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/incidents"
)

// TestRecordYieldsToReleasesInAStorm: with incidents.StormAt nodes fencing, a released node's
// Remediated record waits for another incident still on its way to its release (the
// taints are on the node before); with fewer, it is written at once.
func TestRecordYieldsToReleasesInAStorm(t *testing.T) {
	for _, storm := range []bool{false, true} {
		t.Run(fmt.Sprintf("storm=%v", storm), func(t *testing.T) {
			f := newFixture(t, fixtureConfig(), threeNodes()...)
			f.clock.Set(f0.Add(time.Minute))
			f.renewAllBut("node-1")
			f.c.decide.gate.Max = time.Hour
			if storm {
				for i := range incidents.StormAt {
					f.c.decide.admission.ClaimForced(fmt.Sprintf("storm-%d", i), fmt.Sprintf("storm-node-%d", i), f.clock.Now())
				}
			}
			f.c.decide.gate.Enter() // another incident on its way to its release
			done := make(chan error, 1)
			go func() {
				_, err := f.c.sync(context.Background(), "node-1")
				done <- err
			}()
			returned := func() bool {
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("sync: %v", err)
					}
					return true
				default:
					return false
				}
			}
			if storm {
				pollUntil(t, "the record held back", func() bool { return f.c.decide.gate.Holding() == 1 })
				if !outOfService(t, f, "node-1") {
					t.Error("the record is held back before the release")
				}
				if phase := f.incident("node-1").Status.Phase; phase == v1alpha1.PhaseRemediated {
					t.Errorf("phase %s while the other release is under way", phase)
				}
				f.c.decide.gate.Leave()
			}
			pollUntil(t, "sync returned", returned)
			if phase := f.incident("node-1").Status.Phase; phase != v1alpha1.PhaseRemediated {
				t.Errorf("phase %s, want Remediated", phase)
			}
		})
	}
}

// outOfService reports whether the API server has node's out-of-service taint.
func outOfService(t *testing.T, f *fixture, node string) bool {
	t.Helper()
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, taint := range n.Spec.Taints {
		if taint.Key == corev1.TaintNodeOutOfService {
			return true
		}
	}
	return false
}
