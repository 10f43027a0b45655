package loopmetrics

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

var t0 = time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)

// incident is node's incident in phase, under policy, its first level verified at
// verified (none when zero).
func incident(node string, phase v1alpha1.Phase, policy string, verified time.Time) *v1alpha1.NodeFence {
	nf := &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: node},
		Status: v1alpha1.NodeFenceStatus{Phase: phase, Policy: policy, Level: 1}}
	a := v1alpha1.Attempt{Level: 1, Agent: "ipmi", Try: 1, State: v1alpha1.AttemptFencing, Started: metav1.NewMicroTime(t0)}
	if !verified.IsZero() {
		at := metav1.NewMicroTime(verified)
		a.State, a.Finished, nf.Status.VerifiedLevel = v1alpha1.AttemptVerified, &at, 1
	}
	nf.Status.Attempts = []v1alpha1.Attempt{a}
	return nf
}

// TestFencedNodes: an open incident whose fence is verified (read back, or confirmed off
// by a person) lists its node, with the incident's own action, else its policy's, else
// Off; an incident not verified yet, or ended, lists nothing.
func TestFencedNodes(t *testing.T) {
	policies := []v1alpha1.Policy{{Name: "off", Action: v1alpha1.ActionOff}, {Name: "reboot", Action: v1alpha1.ActionReboot}}
	verified := t0.Add(10 * time.Second)
	for name, tc := range map[string]struct {
		nf   *v1alpha1.NodeFence
		want []FencedNode
	}{
		"fenced": {incident("node-1", v1alpha1.PhaseFenced, "off", verified),
			[]FencedNode{{Node: "node-1", Action: v1alpha1.ActionOff, Since: verified}}},
		"remediated, reboot policy": {incident("node-1", v1alpha1.PhaseRemediated, "reboot", verified),
			[]FencedNode{{Node: "node-1", Action: v1alpha1.ActionReboot, Since: verified}}},
		"the incident's own action": {func() *v1alpha1.NodeFence {
			nf := incident("node-1", v1alpha1.PhaseRemediated, "reboot", verified)
			nf.Spec.Action = v1alpha1.ActionOff
			return nf
		}(), []FencedNode{{Node: "node-1", Action: v1alpha1.ActionOff, Since: verified}}},
		"policy since removed": {incident("node-1", v1alpha1.PhaseRemediated, "gone", verified),
			[]FencedNode{{Node: "node-1", Action: v1alpha1.ActionOff, Since: verified}}},
		"confirmed off by a person": {func() *v1alpha1.NodeFence {
			nf := incident("node-1", v1alpha1.PhaseRemediated, "off", time.Time{})
			nf.Status.ConfirmedOff = &v1alpha1.PersonWord{Time: metav1.NewMicroTime(t0.Add(time.Minute))}
			return nf
		}(), []FencedNode{{Node: "node-1", Action: v1alpha1.ActionOff, Since: t0.Add(time.Minute)}}},
		"fencing":   {incident("node-1", v1alpha1.PhaseFencing, "off", time.Time{}), nil},
		"recovered": {incident("node-1", v1alpha1.PhaseRecovered, "off", verified), nil},
		"failed":    {incident("node-1", v1alpha1.PhaseFailed, "off", time.Time{}), nil},
		"cancelled": {incident("node-1", v1alpha1.PhaseCancelled, "off", time.Time{}), nil},
	} {
		t.Run(name, func(t *testing.T) {
			if got := FencedNodes([]*v1alpha1.NodeFence{tc.nf}, policies); !slices.Equal(got, tc.want) {
				t.Errorf("FencedNodes = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSetFenced: kubefence_node_fenced_timestamp_seconds shows every node listed, with
// when its fence was verified, and drops a node once it is no longer listed (its
// incident ended).
func TestSetFenced(t *testing.T) {
	m := New(nil)
	const head = "# HELP kubefence_node_fenced_timestamp_seconds " +
		"When the fence of a node whose incident is still open was verified (read back off, or a person's confirm-off accepted), in Unix seconds, by the incident's action (Off, Reboot); the series goes when the incident ends. Set by the leader, refreshed every 5s.\n" +
		"# TYPE kubefence_node_fenced_timestamp_seconds gauge\n"
	steps := []struct {
		nodes []FencedNode
		want  string
	}{
		{[]FencedNode{{Node: "node-1", Action: v1alpha1.ActionOff, Since: t0}, {Node: "node-2", Action: v1alpha1.ActionReboot, Since: t0.Add(90 * time.Second)}},
			head + fmt.Sprintf(`kubefence_node_fenced_timestamp_seconds{action="Off",node="node-1"} %d
kubefence_node_fenced_timestamp_seconds{action="Reboot",node="node-2"} %d
`, t0.Unix(), t0.Unix()+90)},
		// node-2 recovered.
		{[]FencedNode{{Node: "node-1", Action: v1alpha1.ActionOff, Since: t0}},
			head + fmt.Sprintf(`kubefence_node_fenced_timestamp_seconds{action="Off",node="node-1"} %d
`, t0.Unix())},
		// node-1 brought back and recovered.
		{nil, ""},
	}
	for i, s := range steps {
		m.SetFenced(s.nodes)
		if err := testutil.CollectAndCompare(m.Fenced, strings.NewReader(s.want)); err != nil {
			t.Errorf("step %d: %v", i, err)
		}
	}
}
