package incidents

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestFailedAt: the node failed when the incident's evidence turned bad; a request that
// recorded no evidence counts from its creation.
func TestFailedAt(t *testing.T) {
	created := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	if got := FailedAt(nf); !got.Equal(created) {
		t.Errorf("no evidence: %s, want the creation %s", got, created)
	}
	bad := created.Add(-40 * time.Second)
	AddStep(&nf.Status, bad, v1alpha1.StepEvidenceStarted, "lease stale")
	if got := FailedAt(nf); !got.Equal(bad) {
		t.Errorf("with evidence: %s, want %s", got, bad)
	}
}
