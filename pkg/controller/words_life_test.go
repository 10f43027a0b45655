package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/nodeagent"
)

// authorize makes the fake API server's authorizer allow the users in allowed to create
// nodefences/confirm and nodefences/cancel, and nobody else anything; it returns the
// reviews asked of it.
func (f *fixture) authorize(allowed ...string) *[]authorizationv1.SubjectAccessReviewSpec {
	var asked []authorizationv1.SubjectAccessReviewSpec
	f.kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		asked = append(asked, sar.Spec)
		ra := sar.Spec.ResourceAttributes
		for _, u := range allowed {
			if sar.Spec.User == u && ra != nil && ra.Group == v1alpha1.GroupName && ra.Resource == "nodefences" && ra.Verb == "create" &&
				(ra.Subresource == v1alpha1.SubresourceConfirm || ra.Subresource == v1alpha1.SubresourceCancel) {
				sar.Status.Allowed, sar.Status.Reason = true, "RBAC: allowed by ClusterRoleBinding kubefence-oncall"
			}
		}
		return true, sar, nil
	})
	return &asked
}

// replicaOn is the identity Lease of a controller replica on node, renewed and seen at at.
func (f *fixture) replicaOn(node string, at time.Time) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leader.LeaseName("controller", "standby_7_x"), Namespace: "kubefence",
		Labels:      map[string]string{leader.IdentityLabel: "true", leader.ComponentLabel: "controller", v1alpha1.NodeLabel: node},
		Annotations: map[string]string{v1alpha1.NodeAnnotation: node}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("standby_7_x"), RenewTime: ptr.To(metav1.NewMicroTime(at))}}
	f.c.peers.replicas.Observe(l, at)
}

// agentReported is node's agent's report Lease, every 10s (its Lease states 30s), seen
// by the watch at at.
func (f *fixture) agentReported(node string, at time.Time) {
	f.t.Helper()
	f.reports++
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.DefaultLeaseNamespace, Name: nodeagent.LeaseName(node),
		ResourceVersion: fmt.Sprint(f.reports)}, Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](30)}}
	r := nodeagent.Report{BootID: "boot-" + node, Isolation: "10s", ReportInterval: "10s",
		Members: nodeagent.MembersOf([]string{"node-1", "node-2", "node-3"})}
	if err := r.Encode(l, node); err != nil {
		f.t.Fatal(err)
	}
	now := f.clock.Now()
	f.clock.Set(at)
	f.agents().ObserveReport(l)
	f.clock.Set(now)
}

// expectWordRefused checks that node-1's Failed incident refused its word, saying says,
// and that nothing of the node was released.
func (f *fixture) expectWordRefused(says string) {
	f.t.Helper()
	got := f.incident("node-1")
	refused := stepsOf(got, v1alpha1.StepWordRefused)
	if got.Status.Verified() || got.Status.Phase != v1alpha1.PhaseFailed || len(refused) != 1 || !strings.Contains(refused[0], says) {
		f.t.Fatalf("phase %s, confirmedOff %+v, refusals %q: want the word refused saying %q", got.Status.Phase, got.Status.ConfirmedOff, refused, says)
	}
	for _, r := range f.requests() {
		if strings.HasPrefix(r, "update nodes") || strings.HasPrefix(r, "patch nodes") || strings.HasPrefix(r, "delete") {
			f.t.Errorf("released a node that may be alive: %s", r)
		}
	}
	f.expectEvents(v1alpha1.StepWordRefused)
}

// The node of these tests lost its kubelet: its Lease stopped at f0, when its incident
// opened, and a minute later every level has failed (its BMC does not answer). Whether
// the rest of it still runs is for the other signs to say.

// TestFixtureConfirmOffRefusedWhileReplicaRuns: a standby replica on the node renewed
// its identity Lease 2s ago: the node runs, whatever its kubelet's Lease says.
func TestFixtureConfirmOffRefusedWhileReplicaRuns(t *testing.T) {
	f := newFixture(t, fixtureConfig(), append(threeNodes(), failedWithWord())...)
	f.authorize("alice")
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.replicaOn("node-1", f.clock.Now().Add(-2*time.Second))
	f.sync("node-1")
	f.expectCalls()
	f.expectWordRefused("node node-1 is alive: a controller replica runs on it: replica standby_7_x was last seen renewing its identity Lease")
}

// TestFixtureConfirmOffRefusedWhileAgentReports: the node's agent reported 3s ago, within
// the 30s its Lease states: the node runs.
func TestFixtureConfirmOffRefusedWhileAgentReports(t *testing.T) {
	f := newFixture(t, fixtureConfig(), append(threeNodes(), failedWithWord())...)
	f.authorize("alice")
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.agentReported("node-1", f.clock.Now().Add(-3*time.Second))
	f.sync("node-1")
	f.expectCalls()
	f.expectWordRefused("node node-1 is alive: its node agent reported 3s ago (a report counts for 30s)")
}

// TestFixtureConfirmOffRefusedForAuthorNotAllowed: the API server's authorizer does not
// let the author the word names create nodefences/confirm (the admission policy is off,
// and someone who may update NodeFences set the word), or the word names nobody: it is
// refused, on a node nothing shows alive.
func TestFixtureConfirmOffRefusedForAuthorNotAllowed(t *testing.T) {
	for name, tc := range map[string]struct {
		by   string
		says string
	}{
		"author not allowed": {"alice", "alice may not create nodefences/confirm: no rule allows it"},
		"no author":          {"", "it names no author (fencing.kubefence.io/confirm-off-by is empty or missing)"},
	} {
		t.Run(name, func(t *testing.T) {
			nf := failedWithWord()
			nf.Annotations[v1alpha1.ConfirmOffByAnnotation] = tc.by
			f := newFixture(t, fixtureConfig(), append(threeNodes(), nf)...)
			asked := f.authorize("bob")
			f.clock.Set(f0.Add(time.Minute))
			f.renewAllBut("node-1")
			f.sync("node-1")
			f.expectCalls()
			f.expectWordRefused(tc.says)
			if tc.by != "" && (len(*asked) != 1 || (*asked)[0].User != tc.by) {
				t.Errorf("reviews asked %+v, want one of %s", *asked, tc.by)
			}
		})
	}
}

// TestFixtureConfirmOffTakenOnceSignsAreGone: the replica on the node and its agent's
// report were last seen at f0, past their bounds a minute later (15s, 30s); its Lease,
// read live, shows no renewal since the incident opened; the author may give the word:
// the node is released on it, with no agent call.
func TestFixtureConfirmOffTakenOnceSignsAreGone(t *testing.T) {
	f := newFixture(t, fixtureConfig(), append(threeNodes(), failedWithWord())...)
	asked := f.authorize("alice")
	f.replicaOn("node-1", f0)
	f.agentReported("node-1", f0)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectCalls()
	st := f.incident("node-1").Status
	if st.Phase != v1alpha1.PhaseRemediated || st.ConfirmedOff == nil || st.ConfirmedOff.By != "alice" || len(st.Remediation.TaintsAdded) == 0 {
		t.Fatalf("phase %s, confirmedOff %+v, taints %v, timeline %+v: want released on alice's word", st.Phase, st.ConfirmedOff, st.Remediation.TaintsAdded, st.Timeline)
	}
	if len(*asked) != 1 || (*asked)[0].User != "alice" || (*asked)[0].ResourceAttributes.Subresource != v1alpha1.SubresourceConfirm {
		t.Errorf("reviews asked %+v, want alice's create nodefences/confirm", *asked)
	}
}

// TestFixtureConfirmOffRefusedWhileKubeletAnswers: with heartbeats, the replica's routine
// check of the node's kubelet had an answer: the kubelet runs, though its Lease is
// silent (it cannot reach the API server).
func TestFixtureConfirmOffRefusedWhileKubeletAnswers(t *testing.T) {
	f, _ := heartbeatFixture(t, strings.TrimPrefix(answeringKubelet(t).URL, "https://"))
	heardKubelet(t, f)
	answered := f.c.detector.KubeletAnswered("node-1")
	nf := failedWithWord()
	nf.Status.LeaseRenewTime = ptr.To(metav1.NewMicroTime(f.clock.Now()))
	f.cache(nf)
	if err := f.dyn.Tracker().Add(nf); err != nil {
		t.Fatal(err)
	}
	f.authorize("alice")
	f.clock.Step(10 * time.Second)
	f.renewAllBut("node-1")
	f.requests()
	f.sync("node-1")
	f.expectCalls()
	f.expectWordRefused(fmt.Sprintf("node node-1 is alive: its kubelet answered a probe %s ago", f.clock.Now().Sub(answered)))
}
