package nodeagentwatch

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/selffence"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

var t0 = time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)

// watchdogConfig has one policy whose only level is the node's watchdog.
func watchdogConfig() *v1alpha1.Config {
	cfg := &v1alpha1.Config{Policies: []v1alpha1.Policy{{Name: "default", Levels: []v1alpha1.Level{{Watchdog: true}}}}}
	cfg.Default()
	return cfg
}

func member(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-" + name}}}
}

// TestWatchdogVerdictAgentLeft: a goodbye of the node's agent among its peers after its
// latest report makes the node ineligible (it was stopped, and may have disarmed); one
// before it (a rollout whose new agent has reported since) does not.
func TestWatchdogVerdictAgentLeft(t *testing.T) {
	cfg := watchdogConfig()
	now := t0
	w := newWatchdogs(cfg.Watchdog, func() time.Time { return now })
	var members []*corev1.Node
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		members = append(members, member(n))
	}
	r := nodeagent.Report{BootID: "boot-node-1", Isolation: "10s", ReportInterval: "30s",
		Members: nodeagent.MembersOf([]string{"node-1", "node-2", "node-3"}), Watchdog: nodeagent.WatchdogReport{Kind: watchdog.KindDevice, Armed: true, Timeout: "5s"}}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Watchdog.Namespace, Name: nodeagent.LeaseName("node-1"), ResourceVersion: "1"}}
	if err := r.Encode(l, "node-1"); err != nil {
		t.Fatal(err)
	}
	w.observe(l)
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-1-x1", CreationTimestamp: metav1.NewTime(t0.Add(10 * time.Second))}}
	now = t0.Add(time.Minute)
	for name, tc := range map[string]struct {
		left  time.Time
		state selffence.State
	}{
		"a goodbye after the report":  {t0.Add(time.Second), selffence.Ineligible},
		"a goodbye before the report": {t0.Add(-time.Second), selffence.Waiting},
		"no goodbye":                  {time.Time{}, selffence.Waiting},
	} {
		v := w.verdict(nf, members[0], members, time.Time{}, tc.left, false)
		if v.State != tc.state || (tc.state == selffence.Ineligible && !strings.Contains(v.Reason, "node node-1: the agent left its peers at")) {
			t.Errorf("%s: %s (%s), want %s", name, v.State, v.Reason, tc.state)
		}
	}
}
