package fencer

import (
	"testing"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// TestLastAttempt: none before the first attempt; then the latest, in place.
func TestLastAttempt(t *testing.T) {
	st := &v1alpha1.NodeFenceStatus{}
	if a := LastAttempt(st); a != nil {
		t.Fatalf("no attempts: got %+v, want nil", a)
	}
	st.Attempts = []v1alpha1.Attempt{{Level: 1, Try: 1}, {Level: 1, Try: 2}}
	if a := LastAttempt(st); a != &st.Attempts[1] {
		t.Errorf("got %+v, want the second attempt itself", a)
	}
}
