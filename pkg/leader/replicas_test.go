package leader

import (
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestReplicasOn(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	r := NewReplicas("node-self", 10*time.Second)
	lease := func(node string, renew time.Time) *coordinationv1.Lease {
		rt, holder := metav1.NewMicroTime(renew), "host_1_abc"
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-controller-1", Labels: map[string]string{v1alpha1.NodeLabel: node}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &rt}}
	}
	r.Observe(lease("node-2", t0.Add(-time.Hour)), t0) // first sighting counts
	r.Observe(lease("node-2", t0.Add(-time.Hour)), t0.Add(20*time.Second))
	for name, tc := range map[string]struct {
		node  string
		at    time.Duration
		alive bool
	}{
		"own node, always":                  {"node-self", time.Hour, true},
		"replica seen 29s ago":              {"node-2", 29 * time.Second, true},
		"replica silent for three renewals": {"node-2", 30 * time.Second, false},
		"a node with no replica":            {"node-3", 0, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got, _ := r.On(tc.node, t0.Add(tc.at)); (got != "") != tc.alive {
				t.Errorf("on(%s) = %q, want alive %v", tc.node, got, tc.alive)
			}
		})
	}
	// The evidence of one renewal reads the same at every look: a held incident records
	// its hold once, not at every sync (a demo-cluster run wrote 76 Hold steps in 1.7s).
	a, until := r.On("node-2", t0.Add(time.Second))
	if b, _ := r.On("node-2", t0.Add(2*time.Second)); a != b {
		t.Errorf("the same renewal reads %q, then %q", a, b)
	}
	// The evidence lapses three intervals after the renewal was first seen (t0; the same
	// renewal seen again at +20s is not a new one), and says so: a hold on it is looked
	// at again right then.
	if want := t0.Add(30 * time.Second); !until.Equal(want) {
		t.Errorf("replica on node-2 lapses at %s, want %s", until, want)
	}
	if _, u := r.On("node-self", t0); !u.IsZero() {
		t.Errorf("this replica's own node lapses at %s, want never (zero)", u)
	}
	r.Observe(lease("node-2", t0.Add(time.Minute)), t0.Add(time.Minute))
	if e, _ := r.On("node-2", t0.Add(70*time.Second)); e == "" {
		t.Errorf("a renewal seen again makes the replica alive again")
	}
	r.Forget("kubefence-controller-1")
	if e, _ := r.On("node-2", t0.Add(70*time.Second)); e != "" {
		t.Errorf("a deleted identity Lease still counts")
	}
}
