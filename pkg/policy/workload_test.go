package policy

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

func secs(s int64) *time.Duration { d := time.Duration(s) * time.Second; return &d }

func TestThreshold(t *testing.T) {
	off := false
	base := 30 * time.Second
	tests := map[string]struct {
		policy *v1alpha1.Policy
		node   Node
		want   time.Duration
	}{
		"no workload facts: base":            {policy: testPolicy(), want: base},
		"toleration shorter than base":       {policy: testPolicy(), node: Node{Workload: Workload{MinUnreachableToleration: secs(12)}}, want: 12 * time.Second},
		"toleration longer than base":        {policy: testPolicy(), node: Node{Workload: Workload{MinUnreachableToleration: secs(300)}}, want: base},
		"toleration 0 stops at minWait":      {policy: testPolicy(), node: Node{Workload: Workload{MinUnreachableToleration: secs(0)}}, want: 5 * time.Second},
		"tolerations not honored":            {policy: testPolicy(func(p *v1alpha1.Policy) { p.HonorTolerations = &off }), node: Node{Workload: Workload{MinUnreachableToleration: secs(12)}}, want: base},
		"urgent: minWait":                    {policy: testPolicy(), node: Node{Workload: Workload{Urgent: true}}, want: 5 * time.Second},
		"urgent, budgets not honored":        {policy: testPolicy(func(p *v1alpha1.Policy) { p.HonorDisruptionBudgets = &off }), node: Node{Workload: Workload{Urgent: true}}, want: base},
		"urgent with a longer toleration":    {policy: testPolicy(), node: Node{Workload: Workload{Urgent: true, MinUnreachableToleration: secs(20)}}, want: 5 * time.Second},
		"minWait above base never lengthens": {policy: testPolicy(func(p *v1alpha1.Policy) { p.MinWait.Duration = time.Minute }), node: Node{Workload: Workload{Urgent: true}}, want: base},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Threshold(tc.policy, tc.node, base); got != tc.want {
				t.Errorf("Threshold = %s, want %s", got, tc.want)
			}
		})
	}
}

func pod(ns, name string, lbl map[string]string, owner string, tol ...corev1.Toleration) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl},
		Spec: corev1.PodSpec{Tolerations: tol}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if owner != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{Kind: owner, Name: "o", Controller: &yes}}
	}
	return p
}

func unreachable(s *int64, op corev1.TolerationOperator, key string) corev1.Toleration {
	return corev1.Toleration{Key: key, Operator: op, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: s}
}

func TestUnreachableToleration(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	done := pod("a", "done", nil, "", unreachable(i64(1), corev1.TolerationOpExists, corev1.TaintNodeUnreachable))
	done.Status.Phase = corev1.PodSucceeded
	tests := map[string]struct {
		pods []*corev1.Pod
		want *time.Duration
	}{
		"no pods":      {},
		"default 300s": {pods: []*corev1.Pod{pod("a", "x", nil, "", unreachable(i64(300), corev1.TolerationOpExists, corev1.TaintNodeUnreachable))}, want: secs(300)},
		"smallest wins": {pods: []*corev1.Pod{
			pod("a", "x", nil, "", unreachable(i64(300), corev1.TolerationOpExists, corev1.TaintNodeUnreachable)),
			pod("a", "y", nil, "", unreachable(i64(20), corev1.TolerationOpExists, corev1.TaintNodeUnreachable)),
		}, want: secs(20)},
		"forever does not count":      {pods: []*corev1.Pod{pod("a", "ds", nil, "DaemonSet", unreachable(nil, corev1.TolerationOpExists, ""))}},
		"other taints do not count":   {pods: []*corev1.Pod{pod("a", "x", nil, "", unreachable(i64(3), corev1.TolerationOpExists, corev1.TaintNodeNotReady))}},
		"wildcard key counts":         {pods: []*corev1.Pod{pod("a", "x", nil, "", unreachable(i64(7), corev1.TolerationOpExists, ""))}, want: secs(7)},
		"terminal pods do not count":  {pods: []*corev1.Pod{done}},
		"negative seconds count as 0": {pods: []*corev1.Pod{pod("a", "x", nil, "", unreachable(i64(-5), corev1.TolerationOpEqual, corev1.TaintNodeUnreachable))}, want: secs(0)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := UnreachableToleration(tc.pods)
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("UnreachableToleration = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestUrgentAndRelease(t *testing.T) {
	pdb := func(ns string, allowed int32, sel *metav1.LabelSelector) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pdb"},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: sel}, Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
	}
	db := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	pods := []*corev1.Pod{pod("a", "web-1", map[string]string{"app": "web"}, "ReplicaSet"), pod("a", "db-0", map[string]string{"app": "db"}, "StatefulSet")}
	tests := map[string]struct {
		pdbs   []*policyv1.PodDisruptionBudget
		urgent bool
	}{
		"no budgets":              {},
		"budget with room":        {pdbs: []*policyv1.PodDisruptionBudget{pdb("a", 1, db)}},
		"exhausted budget":        {pdbs: []*policyv1.PodDisruptionBudget{pdb("a", 0, db)}, urgent: true},
		"exhausted, other ns":     {pdbs: []*policyv1.PodDisruptionBudget{pdb("b", 0, db)}},
		"exhausted, nil selector": {pdbs: []*policyv1.PodDisruptionBudget{pdb("a", 0, nil)}},
		"exhausted, all selector": {pdbs: []*policyv1.PodDisruptionBudget{pdb("a", 0, &metav1.LabelSelector{})}, urgent: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got, why := Urgent(pods, tc.pdbs); got != tc.urgent || (got && why == "") {
				t.Errorf("Urgent = %v %q, want %v", got, why, tc.urgent)
			}
		})
	}
	if NothingToRelease(pods, 0) {
		t.Error("a StatefulSet pod is something to release")
	}
	if !NothingToRelease(pods[:1], 0) {
		t.Error("a ReplicaSet pod alone is nothing to release")
	}
	if NothingToRelease(pods[:1], 1) {
		t.Error("an RWO attachment is something to release")
	}
}

func TestNewNode(t *testing.T) {
	p := testPolicy()
	n := NewNode(p, "x", map[string]string{ZoneLabel: "z1", ControlPlaneLabel: "", p.ExcludeLabel: "yes"})
	if n.Zone != "z1" || !n.ControlPlane || !n.Excluded {
		t.Errorf("NewNode = %+v", n)
	}
	if n := NewNode(p, "y", nil); n.Zone != "" || n.ControlPlane || n.Excluded {
		t.Errorf("NewNode without labels = %+v", n)
	}
}

func TestTolerates(t *testing.T) {
	taint := corev1.Taint{Key: "fencing.kubefence.io/fenced", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	tests := map[string]struct {
		tol  []corev1.Toleration
		want bool
	}{
		"none":                 {nil, false},
		"everything":           {[]corev1.Toleration{{Operator: corev1.TolerationOpExists}}, true},
		"the key, any value":   {[]corev1.Toleration{{Key: taint.Key, Operator: corev1.TolerationOpExists}}, true},
		"the key and value":    {[]corev1.Toleration{{Key: taint.Key, Value: "true"}}, true},
		"another value":        {[]corev1.Toleration{{Key: taint.Key, Value: "false"}}, false},
		"another effect":       {[]corev1.Toleration{{Key: taint.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}, false},
		"another key":          {[]corev1.Toleration{{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists}}, false},
		"one of several match": {[]corev1.Toleration{{Key: "x", Operator: corev1.TolerationOpExists}, {Key: taint.Key, Operator: corev1.TolerationOpExists}}, true},
	}
	for name, tc := range tests {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tc.tol}}
		if got := Tolerates(pod, &taint); got != tc.want {
			t.Errorf("%s: Tolerates = %v, want %v", name, got, tc.want)
		}
	}
}
