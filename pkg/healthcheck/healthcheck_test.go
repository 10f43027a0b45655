package healthcheck

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

func request(name string, annotations map[string]string, owners ...metav1.OwnerReference) *v1alpha1.KubefenceRemediation {
	return &v1alpha1.KubefenceRemediation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: "0123abcd-4567-89ef-0123-456789abcdef",
		Annotations: annotations, OwnerReferences: owners}}
}

func TestTargetOf(t *testing.T) {
	machine := metav1.OwnerReference{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "m-1"}
	openshift := metav1.OwnerReference{APIVersion: "machine.openshift.io/v1beta1", Kind: "Machine", Name: "m-1"}
	nhc := metav1.OwnerReference{APIVersion: "remediation.medik8s.io/v1alpha1", Kind: "NodeHealthCheck", Name: "workers"}
	for name, tc := range map[string]struct {
		r           *v1alpha1.KubefenceRemediation
		node, mach  string
		caller      string
		machVersion string
	}{
		"NodeHealthCheck's annotation": {r: request("node-1-x7k2p", map[string]string{v1alpha1.RemediationNodeNameAnnotation: "node-1"}, nhc),
			node: "node-1", caller: "NodeHealthCheck workers"},
		"named after the node": {r: request("node-2", nil, nhc), node: "node-2", caller: "NodeHealthCheck workers"},
		"owned by a Cluster API Machine": {r: request("m-1", nil, machine), mach: "m-1", machVersion: "v1beta2",
			caller: "MachineHealthCheck of Machine ns/m-1"},
		"another group's Machine is no Cluster API Machine": {r: request("m-1", nil, openshift), node: "m-1",
			caller: "KubefenceRemediation ns/m-1"},
	} {
		t.Run(name, func(t *testing.T) {
			got := TargetOf(tc.r)
			if got.Node != tc.node {
				t.Errorf("node %q, want %q", got.Node, tc.node)
			}
			switch {
			case tc.mach == "" && got.Machine != nil:
				t.Errorf("machine %v, want none", got.Machine)
			case tc.mach != "" && (got.Machine == nil || got.Machine.Name != tc.mach || got.Machine.Namespace != "ns" ||
				got.Machine.Resource().Version != tc.machVersion || got.Machine.Resource().Resource != "machines"):
				t.Errorf("machine %+v, want ns/%s at %s", got.Machine, tc.mach, tc.machVersion)
			}
			if c := Caller(tc.r); c != tc.caller {
				t.Errorf("caller %q, want %q", c, tc.caller)
			}
			if by := RequestedBy(tc.r); !strings.HasPrefix(by, v1alpha1.RequestedByRemediationPrefix+tc.caller) {
				t.Errorf("requestedBy %q does not start with the prefix and the caller", by)
			}
		})
	}
}

func TestMachineNode(t *testing.T) {
	m := MachineRef{Namespace: "ns", Name: "m-1"}
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"nodeRef": map[string]any{"name": "node-1"}}}}
	if n, err := MachineNode(m, u); err != nil || n != "node-1" {
		t.Errorf("MachineNode = %q, %v; want node-1", n, err)
	}
	_, err := MachineNode(m, &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{}}})
	if err == nil || !strings.Contains(err.Error(), "Machine ns/m-1") {
		t.Errorf("a Machine with no nodeRef: %v, want an error naming it", err)
	}
}

func TestNodeFenceName(t *testing.T) {
	r := request("x", nil)
	for _, node := range []string{"node-1", strings.Repeat("a", 250) + ".b-c", strings.Repeat("a", 240) + "." + strings.Repeat("b", 12)} {
		name := NodeFenceName(node, r.UID)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("NodeFenceName(%q) = %q: %v", node, name, errs)
		}
		if again := NodeFenceName(node, r.UID); again != name {
			t.Errorf("not one name per request: %q then %q", name, again)
		}
	}
	if a, b := NodeFenceName("node-1", "aaaaaaaa-1"), NodeFenceName("node-1", "bbbbbbbb-1"); a == b {
		t.Errorf("two requests share the name %q", a)
	}
	req := Request(r, "node-1")
	if req.Spec.NodeName != "node-1" || !Carries(req, r) || req.Annotations[v1alpha1.RemediationAnnotation] != "ns/x" ||
		req.Labels[v1alpha1.NodeLabel] != "node-1" {
		t.Errorf("Request = %+v", req)
	}
}

func TestWithdrawn(t *testing.T) {
	r := request("node-1", nil)
	uid := string(r.UID)
	now := metav1.Now()
	deleting := r.DeepCopy()
	deleting.DeletionTimestamp = &now
	timedOut := request("node-1", map[string]string{v1alpha1.RemediationTimedOutAnnotation: "2026-11-25T06:00:00Z"})
	other := r.DeepCopy()
	other.UID = "another"
	for name, tc := range map[string]struct {
		r    *v1alpha1.KubefenceRemediation
		want string
	}{
		"stands":          {r, ""},
		"deleted":         {nil, "deleted"},
		"being deleted":   {deleting, "being deleted"},
		"replaced":        {other, "replaced"},
		"timed out (NHC)": {timedOut, "timed out"},
	} {
		got := Withdrawn(tc.r, uid)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: Withdrawn = %q, want %q", name, got, tc.want)
		}
	}
}

// TestMirror: the conditions NodeHealthCheck reads follow the incident: Succeeded only
// once the node was verified fenced and released, False (escalate now) when kubefence
// gave up, Unknown with Processing while it works.
func TestMirror(t *testing.T) {
	incident := func(phase v1alpha1.Phase, verified int32, attempts int) *v1alpha1.NodeFence {
		nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-1-kfr-0123abcd"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "node-1"},
			Status: v1alpha1.NodeFenceStatus{Phase: phase, VerifiedLevel: verified, Message: "msg"}}
		for range attempts {
			nf.Status.Attempts = append(nf.Status.Attempts, v1alpha1.Attempt{Evidence: "chassis power off"})
		}
		return nf
	}
	rebootedBeforeRelease := func(phase v1alpha1.Phase) *v1alpha1.NodeFence {
		nf := incident(phase, 1, 1)
		nf.Status.Timeline = append(nf.Status.Timeline, v1alpha1.Step{Type: v1alpha1.StepReleaseSkipped,
			Message: "release node node-1: node booted again since the incident opened"})
		return nf
	}
	plain := request("node-1", nil)
	timedOut := request("node-1", map[string]string{v1alpha1.RemediationTimedOutAnnotation: "x"})
	type want struct {
		processing, succeeded metav1.ConditionStatus
		reason                string
	}
	T, F, U := metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown
	for name, tc := range map[string]struct {
		r       *v1alpha1.KubefenceRemediation
		nf      *v1alpha1.NodeFence
		problem *Problem
		want    want
	}{
		"no incident yet":            {plain, nil, nil, want{T, U, "Opening"}},
		"timed out before opening":   {timedOut, nil, nil, want{F, F, "TimedOut"}},
		"no node":                    {plain, nil, &Problem{Reason: "NodeNotFound", Message: "node node-1 not found"}, want{F, F, "NodeNotFound"}},
		"pending":                    {plain, incident(v1alpha1.PhasePending, 0, 0), nil, want{T, U, "Pending"}},
		"created, no status yet":     {plain, incident("", 0, 0), nil, want{T, U, "Pending"}},
		"held by the budget":         {plain, incident(v1alpha1.PhaseHeld, 0, 0), nil, want{T, U, "Held"}},
		"fencing":                    {plain, incident(v1alpha1.PhaseFencing, 0, 1), nil, want{T, U, "Fencing"}},
		"fenced, not released yet":   {plain, incident(v1alpha1.PhaseFenced, 1, 1), nil, want{T, U, "Fenced"}},
		"released":                   {plain, incident(v1alpha1.PhaseRemediated, 1, 1), nil, want{F, T, "Remediated"}},
		"recovered after the fence":  {plain, incident(v1alpha1.PhaseRecovered, 1, 1), nil, want{F, T, "Recovered"}},
		"failed: escalate now":       {plain, incident(v1alpha1.PhaseFailed, 0, 3), nil, want{F, F, "Failed"}},
		"withdrawn on the timeout":   {timedOut, incident(v1alpha1.PhaseCancelled, 0, 0), nil, want{F, F, "TimedOut"}},
		"timed out while fencing":    {timedOut, incident(v1alpha1.PhaseFencing, 0, 1), nil, want{T, U, "Fencing"}},
		"timed out, released anyway": {timedOut, incident(v1alpha1.PhaseRemediated, 1, 1), nil, want{F, T, "Remediated"}},
		// The fence held and the node booted again before its release: done, nothing
		// released, and the conditions do not say "released".
		"rebooted before the release": {plain, rebootedBeforeRelease(v1alpha1.PhaseRemediated), nil, want{F, T, ReasonRebootedBeforeRelease}},
		"rebooted, then recovered":    {plain, rebootedBeforeRelease(v1alpha1.PhaseRecovered), nil, want{F, T, ReasonRebootedBeforeRelease}},
	} {
		t.Run(name, func(t *testing.T) {
			st := Mirror(tc.r, "node-1", tc.nf, tc.problem)
			p := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProcessing)
			s := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSucceeded)
			d := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionPermanentNodeDeletionExpected)
			if p == nil || s == nil || d == nil {
				t.Fatalf("conditions %+v, want Processing, Succeeded and PermanentNodeDeletionExpected", st.Conditions)
			}
			if p.Status != tc.want.processing || s.Status != tc.want.succeeded || s.Reason != tc.want.reason || d.Status != metav1.ConditionFalse {
				t.Errorf("Processing=%s Succeeded=%s (%s) PermanentNodeDeletionExpected=%s; want %s %s (%s) False",
					p.Status, s.Status, s.Reason, d.Status, tc.want.processing, tc.want.succeeded, tc.want.reason)
			}
			if tc.want.reason == ReasonRebootedBeforeRelease && strings.Contains(s.Message, "workloads released") {
				t.Errorf("Succeeded says %q: the workloads were not released", s.Message)
			}
			if tc.nf != nil && (st.NodeFence != tc.nf.Name || (len(tc.nf.Status.Attempts) > 0 && st.Evidence != "chassis power off")) {
				t.Errorf("status %+v does not name the incident and its evidence", st)
			}
			if again := Mirror(&v1alpha1.KubefenceRemediation{ObjectMeta: tc.r.ObjectMeta, Status: st}, "node-1", tc.nf, tc.problem); !equalConditions(again.Conditions, st.Conditions) {
				t.Errorf("mirroring twice changed the conditions: %+v then %+v", st.Conditions, again.Conditions)
			}
		})
	}
}

func equalConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
