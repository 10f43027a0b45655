package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/orphans"
	"github.com/kubefence/kubefence/pkg/plugin/plugintest"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	"github.com/kubefence/kubefence/pkg/incidents"
	shared "github.com/kubefence/kubefence/pkg/internal/fixture"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/policy"
)

// The controller's fixture, as sample-controller's: fake clients, informer caches
// preloaded by hand (nothing runs in the background), a fake clock that the detector,
// the machine and the agents' deadlines all read, and an agent made of function fields.
// Each path test asserts the exact API requests the path sends.

var f0 = shared.T0

type fixture struct {
	t    testing.TB
	c    *Controller
	kube *fake.Clientset
	dyn  *fencingfake.Clientset
	// machines serves Cluster API Machines (unstructured objects given to newFixture).
	machines *dynamicfake.FakeDynamicClient
	bmc      *plugintest.Machine
	clock    *shared.Clock
	rec      *record.FakeRecorder
	// reports counts the node agent reports given (their resourceVersions).
	reports int
	// orphans is the orphan repair beside the loop (repair).
	orphans *orphans.Repair
}

// fixtureConfig has one agent, ipmi, whose target is the node's "bmc" annotation, and
// one policy over every node.
func fixtureConfig() *v1alpha1.Config {
	cfg := &v1alpha1.Config{
		Agents:   []v1alpha1.Agent{{Name: "ipmi", SHA256: strings.Repeat("0", 64), Target: v1alpha1.TargetSource{Annotation: "bmc"}}},
		Policies: []v1alpha1.Policy{{Name: "default", Levels: []v1alpha1.Level{{Agents: []string{"ipmi"}}}}},
	}
	cfg.Default()
	return cfg
}

// newFixture is a controller over objs (Nodes, Leases, Pods, VolumeAttachments,
// NodeFences, KubefenceRemediations, and Cluster API Machines as unstructured objects),
// each both in its fake API server and in its caches, at f0. A Lease is
// seen renewed at f0.
func newFixture(t testing.TB, cfg *v1alpha1.Config, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: shared.NewClock(f0), bmc: &plugintest.Machine{On: true}, rec: record.NewFakeRecorder(100)}
	var kubeObjs, nfObjs, machines []runtime.Object
	for _, o := range objs {
		switch o.(type) {
		case *v1alpha1.NodeFence, *v1alpha1.KubefenceRemediation:
			nfObjs = append(nfObjs, o)
		case *unstructured.Unstructured:
			machines = append(machines, o)
		default:
			kubeObjs = append(kubeObjs, o)
		}
	}
	f.kube = fake.NewClientset(kubeObjs...)
	f.dyn = fencingfake.NewSimpleClientset(nfObjs...)
	// The fake API server does not generate names; the real one does.
	f.dyn.PrependReactor("create", "nodefences", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if nf, ok := a.(k8stesting.CreateAction).GetObject().(*v1alpha1.NodeFence); ok && nf.Name == "" {
			nf.Name = nf.GenerateName + "x1"
		}
		return false, nil, nil
	})
	f.enforceResourceVersions()
	f.machines = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{shared.MachinesV1beta2: "MachineList"}, machines...)
	c := newLoop(t, loopParts{cfg: cfg, kube: f.kube, fencing: f.dyn, dynamic: f.machines, agents: plugintest.One{A: f.bmc}, recorder: f.rec,
		now: f.clock.Now})
	f.c = c
	for _, o := range kubeObjs {
		f.cache(o)
	}
	for _, o := range nfObjs {
		f.cache(o)
	}
	f.kube.ClearActions()
	f.dyn.ClearActions()
	return f
}

// cache puts o in the controller's informer caches, as a watch event would.
func (f *fixture) cache(o runtime.Object) {
	f.t.Helper()
	var err error
	switch o := o.(type) {
	case *corev1.Node:
		err = f.c.opts.Caches.Kube.Core().V1().Nodes().Informer().GetIndexer().Add(o)
	case *corev1.Pod:
		err = f.c.caches.pods.GetIndexer().Add(o)
	case *storagev1.VolumeAttachment:
		err = f.c.opts.Caches.Kube.Storage().V1().VolumeAttachments().Informer().GetIndexer().Add(o)
	case *coordinationv1.Lease:
		err = f.c.opts.Caches.NodeLeases.Coordination().V1().Leases().Informer().GetIndexer().Add(o)
		f.c.detector.ObserveLease(o, f.clock.Now())
	case *v1alpha1.NodeFence:
		err = nfIndexer(f.c).Update(o.DeepCopy())
	case *v1alpha1.KubefenceRemediation:
		if f.c.peers.requests == nil {
			f.t.Fatal("fixture: a KubefenceRemediation needs externalRemediation.enabled")
		}
		err = f.c.opts.Caches.Fencing.Fencing().V1alpha1().KubefenceRemediations().Informer().GetIndexer().Update(o.DeepCopy())
	default:
		f.t.Fatalf("fixture: no cache for %T", o)
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// sync runs one sync of node at the fixture's clock.
func (f *fixture) sync(node string) time.Duration {
	f.t.Helper()
	d, err := f.c.sync(context.Background(), node)
	if err != nil {
		f.t.Fatalf("sync %s: %v", node, err)
	}
	return d
}

// requests are the API requests sent since the fixture was made (or last asked), as
// "verb resource[/subresource] [name]", the kube client's first.
func (f *fixture) requests() []string { return shared.Actions(&f.kube.Fake, &f.dyn.Fake) }

func (f *fixture) expectRequests(want ...string) {
	f.t.Helper()
	shared.ExpectActions(f.t, want, &f.kube.Fake, &f.dyn.Fake)
}

func (f *fixture) expectCalls(want ...string) {
	f.t.Helper()
	got := f.bmc.TakeCalls()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		f.t.Errorf("agent calls %v, want %v", got, want)
	}
}

// incident is node's one NodeFence as the API server has it.
func (f *fixture) incident(node string) *v1alpha1.NodeFence {
	f.t.Helper()
	found := f.incidents(node)
	if len(found) != 1 {
		f.t.Fatalf("%d incidents for %s, want 1", len(found), node)
	}
	return found[0]
}

// incidents are node's NodeFences in the fake API server.
func (f *fixture) incidents(node string) []*v1alpha1.NodeFence {
	f.t.Helper()
	list, err := f.dyn.FencingV1alpha1().NodeFences().List(context.Background(), metav1.ListOptions{})
	f.dyn.ClearActions()
	if err != nil {
		f.t.Fatal(err)
	}
	var found []*v1alpha1.NodeFence
	for i := range list.Items {
		if nf := &list.Items[i]; nf.Spec.NodeName == node {
			found = append(found, nf)
		}
	}
	return found
}

// expectEvents checks the reasons of the Events recorded since last asked, in order;
// each goes to the node and to the incident, so each reason comes twice.
func (f *fixture) expectEvents(reasons ...string) {
	f.t.Helper()
	var got, want []string
	for _, e := range f.events() {
		got = append(got, strings.Fields(e)[1])
	}
	want = append(want, reasons...)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		f.t.Errorf("event reasons %v, want %v", got, want)
	}
}

// events drains the Events recorded so far.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// fixtureNode and fixtureLease are the shared fixture's Node (whose "bmc" annotation
// fixtureConfig's agent targets) and kubelet Lease.
var (
	fixtureNode  = shared.Node
	fixtureLease = shared.Lease
)

// stepsOf are the messages of an incident's steps of one type.
var stepsOf = shared.StepsOf

// threeNodes are node-1..3, Ready on boot-N, their Leases renewed at f0.
func threeNodes() []runtime.Object { return shared.Nodes(3, f0) }

// renewAllBut renews every node Lease but those of dead, at the fixture's clock.
func (f *fixture) renewAllBut(dead ...string) {
	f.t.Helper()
	for i := 1; i <= 3; i++ {
		n := fmt.Sprintf("node-%d", i)
		if !strings.Contains(strings.Join(dead, ","), n) {
			f.cache(fixtureLease(n, f.clock.Now()))
		}
	}
}

// fixturePodAndAttachment are web-0 on node-1 and its volume's attachment there.
func fixturePodAndAttachment() (*corev1.Pod, *storagev1.VolumeAttachment) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0", UID: "u1"},
		Spec: corev1.PodSpec{NodeName: "node-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	pv := "pv-1"
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-1"},
		Spec: storagev1.VolumeAttachmentSpec{NodeName: "node-1", Attacher: "csi.example.com", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}}}
	return pod, va
}

// TestFixtureFence: a node whose Lease goes stale is fenced and released in one sync.
// The requests are the path's whole cost: a live read of the Lease before the incident
// opens, the open-incident check, the create, a status write before the agent call and
// after each step, the pod's condition, the taints, the pod and attachment deletions.
// The pods and attachments released come from the caches: the out-of-service taint
// that follows makes kube-controller-manager clean up what a cache missed.
func TestFixtureFence(t *testing.T) {
	pod, va := fixturePodAndAttachment()
	f := newFixture(t, fixtureConfig(), append(threeNodes(), pod, va)...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectRequests(
		// kube: the pod's NodeUnreachable condition, the live Lease read before opening,
		// the release (fenced taint, pods, attachments, out-of-service taint)
		"patch pods/status web-0", "get leases node-1",
		"update nodes", "update pods/status", "delete pods web-0",
		"delete volumeattachments va-1", "update nodes",
		// NodeFences: no open incident live, the create, the status before the Fence
		// call, and Remediated (each taint's owner goes on the node with it)
		"list nodefences", "create nodefences", "update nodefences/status", "update nodefences/status")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
	nf := f.incident("node-1")
	if nf.Status.Phase != v1alpha1.PhaseRemediated {
		t.Errorf("phase %s, want Remediated (%s)", nf.Status.Phase, nf.Status.Message)
	}
	f.expectEvents(v1alpha1.ReasonFenceStarted, v1alpha1.ReasonRemediated)
}

// TestFixtureDirectReadsAttachmentsLive: with strategy Direct no out-of-service taint
// follows, and nothing else would detach a volume the cache missed: the release lists
// the VolumeAttachments from the API server.
func TestFixtureDirectReadsAttachmentsLive(t *testing.T) {
	pod, va := fixturePodAndAttachment()
	cfg := fixtureConfig()
	cfg.Policies[0].Remediation = v1alpha1.StrategyDirect
	f := newFixture(t, cfg, append(threeNodes(), pod, va)...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectRequests("patch pods/status web-0", "get leases node-1",
		"update nodes", "update pods/status", "delete pods web-0", "list volumeattachments", "delete volumeattachments va-1",
		"list nodefences", "create nodefences", "update nodefences/status", "update nodefences/status")
}

// fencedIncident is node-1's incident as a replica left it at phase: verified fenced by
// ipmi at f0 plus 10s (from Fenced on), on boot-node-1, opened at f0.
func fencedIncident(phase v1alpha1.Phase, attempt v1alpha1.AttemptState) *v1alpha1.NodeFence {
	opened, verified := metav1.NewMicroTime(f0), metav1.NewMicroTime(f0.Add(10*time.Second))
	nf := &v1alpha1.NodeFence{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "NodeFence"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1-x0", ResourceVersion: "1", Labels: map[string]string{v1alpha1.NodeLabel: "node-1"}, CreationTimestamp: metav1.NewTime(f0)},
		Spec:       v1alpha1.NodeFenceSpec{NodeName: "node-1", RequestedBy: v1alpha1.RequestedByController, Reason: "node unhealthy"},
		Status: v1alpha1.NodeFenceStatus{Phase: phase, Policy: "default", BootID: "boot-node-1", Level: 1, Leader: "me", LeaseRenewTime: &opened,
			Timeline: []v1alpha1.Step{{Time: opened, Type: v1alpha1.StepDetected, Message: "unhealthy"}}},
	}
	if attempt == "" {
		return nf
	}
	a := v1alpha1.Attempt{Level: 1, Agent: "ipmi", Try: 1, State: attempt, Started: opened, Deadline: metav1.NewMicroTime(f0.Add(time.Hour))}
	if attempt == v1alpha1.AttemptVerified {
		a.Finished, nf.Status.VerifiedLevel = &verified, 1
	}
	nf.Status.Attempts = []v1alpha1.Attempt{a}
	return nf
}

// TestFixtureResume: a new leader resumes an incident from the phase the last one wrote
// (a crash right after that write): Pending decides again, Fencing reads back the call
// whose outcome was lost (it landed: the machine is off) and never sends it again,
// Fenced releases without calling an agent, Remediated on a dead node does nothing.
func TestFixtureResume(t *testing.T) {
	// The release starts from the cached node: its first update proves the copy current.
	release := []string{"update nodes", "update nodes"}
	statuses := func(n int) []string {
		var out []string
		for range n {
			out = append(out, "update nodefences/status")
		}
		return out
	}
	fenceCalls := []string{"Fence bmc-node-1", "Status bmc-node-1"}
	for name, tc := range map[string]struct {
		phase    v1alpha1.Phase
		attempt  v1alpha1.AttemptState
		leader   string
		requests []string
		calls    []string
		events   []string
	}{
		"Pending": {v1alpha1.PhasePending, "", "me", append(release, statuses(2)...), fenceCalls,
			[]string{v1alpha1.ReasonFenceStarted, v1alpha1.ReasonRemediated}},
		// Evidence another replica gathered is checked against the live Lease first.
		"Pending, adopted": {v1alpha1.PhasePending, "", "other", append(append([]string{"get leases node-1"}, release...), statuses(2)...), fenceCalls,
			[]string{v1alpha1.ReasonFenceStarted, v1alpha1.ReasonRemediated}},
		"Fencing, the call's outcome lost": {v1alpha1.PhaseFencing, v1alpha1.AttemptFencing, "me", append(release, statuses(1)...), []string{"Status bmc-node-1"},
			[]string{v1alpha1.ReasonRemediated}},
		"Fenced": {v1alpha1.PhaseFenced, v1alpha1.AttemptVerified, "me", append(release, statuses(1)...), nil,
			[]string{v1alpha1.ReasonRemediated}},
		"Remediated, the node still dead": {v1alpha1.PhaseRemediated, v1alpha1.AttemptVerified, "me", nil, nil, nil},
	} {
		t.Run(name, func(t *testing.T) {
			nf := fencedIncident(tc.phase, tc.attempt)
			nf.Status.Leader = tc.leader
			f := newFixture(t, fixtureConfig(), append(threeNodes(), nf)...)
			f.bmc.On = tc.attempt != v1alpha1.AttemptFencing // the lost call landed
			f.clock.Set(f0.Add(time.Minute))
			f.renewAllBut("node-1")
			f.sync("node-1")
			f.expectRequests(tc.requests...)
			f.expectCalls(tc.calls...)
			got := f.incident("node-1")
			if got.Status.Phase != v1alpha1.PhaseRemediated {
				t.Errorf("phase %s, want Remediated", got.Status.Phase)
			}
			if n := len(got.Status.Attempts); n != 1 {
				t.Errorf("%d attempts, want 1 (a lost call is read back, not sent again)", n)
			}
			f.expectEvents(tc.events...)
		})
	}
}

// TestFixtureHold: two of three nodes dead is a storm (maxUnhealthy 40%): the incident
// opens and is held; no agent is called, nothing is released.
func TestFixtureHold(t *testing.T) {
	f := newFixture(t, fixtureConfig(), threeNodes()...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1", "node-2")
	f.sync("node-1")
	f.expectRequests("get leases node-1", "list nodefences", "create nodefences", "update nodefences/status")
	f.expectCalls()
	if nf := f.incident("node-1"); nf.Status.Phase != v1alpha1.PhaseHeld {
		t.Errorf("phase %s, want Held (%s)", nf.Status.Phase, nf.Status.Message)
	}
	f.expectEvents(v1alpha1.ReasonDetected, policy.ReasonStorm)
	// The same hold at the next look is not written again.
	f.clock.Step(time.Second)
	f.sync("node-1")
	f.expectRequests()
	f.expectEvents()
}

// TestCreateSendsNoStatus: an incident is created without its status, which the API
// server would drop after decoding it; the detection the controller kept goes
// out with the first decision's status write.
func TestCreateSendsNoStatus(t *testing.T) {
	f := newFixture(t, fixtureConfig(), threeNodes()...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1", "node-2")
	f.sync("node-1")
	var created, written int
	for _, a := range f.dyn.Actions() {
		switch {
		case a.GetVerb() == "create" && a.GetResource().Resource == "nodefences":
			created++
			nf := a.(k8stesting.CreateAction).GetObject().(*v1alpha1.NodeFence)
			if !equality.Semantic.DeepEqual(nf.Status, v1alpha1.NodeFenceStatus{}) {
				t.Errorf("the create sent a status: %+v", nf.Status)
			}
			if nf.Spec.NodeName != "node-1" || nf.Labels[v1alpha1.NodeLabel] != "node-1" {
				t.Errorf("the create sent spec %+v, labels %v", nf.Spec, nf.Labels)
			}
		case a.GetVerb() == "update" && a.GetSubresource() == "status":
			written++
		}
	}
	if created != 1 || written != 1 {
		t.Fatalf("%d creates and %d status writes, want 1 and 1", created, written)
	}
	nf := f.incident("node-1")
	var steps []string
	for _, st := range nf.Status.Timeline {
		steps = append(steps, st.Type)
	}
	if want := []string{v1alpha1.StepEvidenceStarted, v1alpha1.StepDetected, v1alpha1.StepHold}; !slices.Equal(steps, want) {
		t.Errorf("stored timeline %v, want %v", steps, want)
	}
	if nf.Status.Phase != v1alpha1.PhaseHeld || nf.Status.Policy == "" || nf.Status.LeaseRenewTime == nil {
		t.Errorf("stored status lacks the detection: phase %s, policy %q, leaseRenewTime %v", nf.Status.Phase, nf.Status.Policy, nf.Status.LeaseRenewTime)
	}
}

// TestFixtureDryRun: in dry run a dead node is reported (an Event) and nothing is
// written or called, not even the pods' condition.
func TestFixtureDryRun(t *testing.T) {
	cfg := fixtureConfig()
	cfg.DryRun = true
	f := newFixture(t, cfg, threeNodes()...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectRequests()
	f.expectCalls()
	if ev := f.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+v1alpha1.ReasonWouldFence+" ") {
		t.Errorf("events %q, want one WouldFence", ev)
	}
}

// TestFixtureAdoptedIncidentCancelled: a new leader that adopts a Pending incident reads
// the node's Lease live before it fences on evidence it did not gather; a renewal after
// the incident opened cancels it, with no agent call.
func TestFixtureAdoptedIncidentCancelled(t *testing.T) {
	nf := fencedIncident(v1alpha1.PhasePending, "")
	nf.Status.Leader = "other"
	objs := threeNodes()
	objs[1] = fixtureLease("node-1", f0.Add(50*time.Second)) // in the API server, not yet in the cache
	f := newFixture(t, fixtureConfig(), append(objs, nf)...)
	f.cache(fixtureLease("node-1", f0))
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectRequests("get leases node-1", "update nodefences/status")
	f.expectCalls()
	if got := f.incident("node-1"); got.Status.Phase != v1alpha1.PhaseCancelled {
		t.Errorf("phase %s, want Cancelled", got.Status.Phase)
	}
	f.expectEvents(v1alpha1.ReasonCancelled)
}

// TestFixtureLateRelease: a pod bound to the fenced node after its release (a scheduler
// on a stale cache) is released once the agent reads the fence back as holding; the pod
// is read live first.
func TestFixtureLateRelease(t *testing.T) {
	late := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "late-0", UID: "u9"},
		Spec: corev1.PodSpec{NodeName: "node-1"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	f := newFixture(t, fixtureConfig(), append(threeNodes(), fencedIncident(v1alpha1.PhaseRemediated, v1alpha1.AttemptVerified), late)...)
	f.bmc.On = false
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectRequests("patch pods/status late-0", "get pods late-0",
		// the release again: this incident recorded no taints, so both are added
		"update nodes", "update pods/status", "delete pods late-0",
		"update nodes", "update nodefences/status")
	f.expectCalls("Status bmc-node-1")
	if nf := f.incident("node-1"); len(stepsOf(nf, v1alpha1.StepLateRelease)) == 0 {
		t.Errorf("no %s step in %+v", v1alpha1.StepLateRelease, nf.Status.Timeline)
	}
	f.expectEvents(v1alpha1.ReasonLateRelease)
}

// TestFixtureBack: a fenced node back on its fenced boot, renewing and posting status
// after the fence held, contradicts the fence (nothing is undone, no agent is called);
// back with a new boot, the fence is undone and the incident recovers.
func TestFixtureBack(t *testing.T) {
	for name, tc := range map[string]struct {
		boot     string
		requests []string
		calls    []string
		phase    v1alpha1.Phase
		events   []string
	}{
		"same boot": {"boot-node-1", []string{"update nodefences/status"}, nil, v1alpha1.PhaseRemediated,
			[]string{v1alpha1.ReasonFenceContradicted}},
		// The Unfence goes on record before it is sent (a status write), then the taints go
		// and the incident is saved Recovered.
		"new boot": {"boot-2", []string{"get nodes node-1", "update nodes", "update nodefences/status", "update nodefences/status"},
			[]string{"Unfence bmc-node-1"}, v1alpha1.PhaseRecovered, []string{v1alpha1.ReasonRecovered}},
	} {
		t.Run(name, func(t *testing.T) {
			nf := fencedIncident(v1alpha1.PhaseRemediated, v1alpha1.AttemptVerified)
			nf.Status.Remediation.TaintsAdded = []string{"fencing.kubefence.io/fenced"}
			objs := threeNodes()
			objs[0] = fixtureNode("node-1", tc.boot, true)
			objs[0].(*corev1.Node).Spec.Taints = []corev1.Taint{{Key: "fencing.kubefence.io/fenced", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
			f := newFixture(t, fixtureConfig(), append(objs, nf)...)
			f.bmc.On = false
			f.c.detector.Assess(objs[0].(*corev1.Node), f0)
			// The node's renewal and status, both seen after the fence held.
			f.clock.Set(f0.Add(time.Minute))
			f.renewAllBut()
			n := fixtureNode("node-1", tc.boot, true)
			n.Spec.Taints = objs[0].(*corev1.Node).Spec.Taints
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(f.clock.Now())
			f.cache(n)
			f.c.detector.Assess(n, f.clock.Now())
			f.clock.Step(time.Second)
			f.sync("node-1")
			f.expectRequests(tc.requests...)
			f.expectCalls(tc.calls...)
			if got := f.incident("node-1"); got.Status.Phase != tc.phase {
				t.Errorf("phase %s, want %s (%s)", got.Status.Phase, tc.phase, got.Status.Message)
			}
			f.expectEvents(tc.events...)
		})
	}
}

// TestFixtureFenceFails: a BMC that refuses the credentials fails its level at once
// (Permanent: no retry); with no level left the incident is Failed, and nothing of the
// node is released: no taint, no pod or attachment deleted.
func TestFixtureFenceFails(t *testing.T) {
	f := newFixture(t, fixtureConfig(), threeNodes()...)
	f.bmc.FenceFunc = func(context.Context) error { return plugin.Errorf(plugin.KindPermanent, "authentication failed") }
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	// Before it ends Failed, the node is read for a release of this incident (none).
	f.expectRequests("get leases node-1", "get nodes node-1", "list nodefences", "create nodefences", "update nodefences/status", "update nodefences/status")
	f.expectCalls("Fence bmc-node-1")
	if nf := f.incident("node-1"); nf.Status.Phase != v1alpha1.PhaseFailed || !strings.Contains(nf.Status.Message, "authentication failed") {
		t.Errorf("phase %s (%s), want Failed naming the agent's error", nf.Status.Phase, nf.Status.Message)
	}
	f.expectEvents(v1alpha1.ReasonFenceStarted, v1alpha1.ReasonFenceFailed)
}

// TestFixtureFenceCallTimesOut: a Fence call that runs into its deadline has an unknown
// outcome; the state is read back before anything else, and off read back verifies the
// fence (the BMC acted after all).
func TestFixtureFenceCallTimesOut(t *testing.T) {
	cfg := fixtureConfig()
	cfg.Agents[0].Timeout = metav1.Duration{Duration: 100 * time.Millisecond}
	f := newFixture(t, cfg, threeNodes()...)
	f.bmc.FenceFunc = func(ctx context.Context) error {
		<-ctx.Done() // the machine goes off, the answer never comes
		return ctx.Err()
	}
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	f.sync("node-1")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
	nf := f.incident("node-1")
	if nf.Status.Phase != v1alpha1.PhaseRemediated {
		t.Errorf("phase %s (%s), want Remediated", nf.Status.Phase, nf.Status.Message)
	}
	if a := nf.Status.Attempts; len(a) != 1 || a[0].State != v1alpha1.AttemptVerified || a[0].ErrorKind != string(plugin.KindUnknown) {
		t.Errorf("attempts %+v, want one verified after an unknown outcome", a)
	}
}

// TestFixtureForcedPastStorm: a person's force annotation on a held incident fences past
// the storm hold (a budget rule), and the override is on the timeline.
func TestFixtureForcedPastStorm(t *testing.T) {
	nf := fencedIncident(v1alpha1.PhaseHeld, "")
	nf.Annotations = map[string]string{v1alpha1.ForceAnnotation: "true"}
	f := newFixture(t, fixtureConfig(), append(threeNodes(), nf)...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1", "node-2")
	f.sync("node-1")
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
	got := f.incident("node-1")
	if got.Status.Phase != v1alpha1.PhaseRemediated || len(stepsOf(got, v1alpha1.StepForced)) == 0 {
		t.Errorf("phase %s, timeline %+v: want Remediated with a %s step", got.Status.Phase, got.Status.Timeline, v1alpha1.StepForced)
	}
	f.expectEvents(v1alpha1.ReasonFenceStarted, v1alpha1.ReasonRemediated)
}

// TestFixtureSlowAPIServerAfterOutage: the API server comes back from an outage slowly,
// answering the live Lease read long after the sync began. Lease staleness counts again
// from when the API server answered, not from when the sync began: counted from the
// earlier time, the outage itself made every node look dead a moment later, and healthy
// nodes were fenced (make test saw two powered off, 1.4 s after the API server returned).
func TestFixtureSlowAPIServerAfterOutage(t *testing.T) {
	f := newFixture(t, fixtureConfig(), threeNodes()...)
	down := true
	f.kube.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down {
			return true, nil, fmt.Errorf("dial tcp 127.0.0.1:6443: connect: connection refused")
		}
		// Back, but slow: the answer comes an hour into the sync.
		f.clock.Step(time.Hour)
		return false, nil, nil
	})
	f.clock.Set(f0.Add(time.Minute))
	if _, err := f.c.sync(context.Background(), "node-2"); err == nil {
		t.Fatal("sync with the API server down succeeded")
	}
	down = false
	f.sync("node-2") // reachable again: staleness counts from the answer
	f.requests()
	// Less than any threshold after the answer, no kubelet has renewed yet.
	f.clock.Step(time.Second)
	f.sync("node-2")
	if list, _ := f.dyn.FencingV1alpha1().NodeFences().List(context.Background(), metav1.ListOptions{}); len(list.Items) > 0 {
		t.Fatalf("an incident opened for a healthy node a second after the API server answered: %s", list.Items[0].Status.Message)
	}
	f.expectCalls()
}

// nfIndexer is c's cache of NodeFences, which tests fill as the watch would.
func nfIndexer(c *Controller) cache.Indexer {
	return c.opts.Caches.Fencing.Fencing().V1alpha1().NodeFences().Informer().GetIndexer()
}

// prune runs the history retention once, as the leader does.
func (f *fixture) prune() {
	r := &incidents.Retention{Store: f.c.store, History: f.c.cfg.History, Confirm: func(ctx context.Context) error { return f.c.lead.guard.Check(ctx) }, Now: f.c.now}
	r.Prune(context.Background())
}
