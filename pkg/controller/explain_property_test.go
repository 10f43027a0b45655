package controller

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/detector"
	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/maintenance"
	"github.com/kubefence/kubefence/pkg/nodeview"
	"github.com/kubefence/kubefence/pkg/oncall"
	"github.com/kubefence/kubefence/pkg/plugin/plugintest"
	"github.com/kubefence/kubefence/pkg/policy"
)

// TestExplainIsTheLoopsDecision draws random clusters (maintenance signals, controller
// replicas on nodes, node agents gone or present, pause, budgets and storm limits,
// incidents in every phase, nodes Ready, Unknown or NotReady with Leases of every age)
// and checks, for every node of each, that `fence-controller explain` states the very
// decision the incident loop takes for the node's incident (or for the incident it would
// open): explain reads the cluster from the API server, the loop from its caches and
// peers, and both must come to the same verdict, reason and message.
func TestExplainIsTheLoopsDecision(t *testing.T) {
	const seed, states = 56, 2000
	rng := rand.New(rand.NewSource(seed))
	planned := newPlannedReader(t)
	checked := map[string]int{}
	for i := range states {
		st := drawCluster(rng, i)
		st.reader = planned.hold(t, st.planned)
		loop := st.loop(t)
		for _, n := range st.nodes {
			want := loopDecision(t, loop, n.Name, st.now)
			got := st.explain(t, n.Name)
			if got != want {
				t.Fatalf("state %d of seed %d, node %s:\n  loop:    %s\n  explain: %s\ncluster:\n%s", i, seed, n.Name, want, got, st)
			}
			checked[strings.TrimSuffix(strings.Fields(want)[1], ":")]++
		}
	}
	t.Logf("decisions compared, by reason: %v", checked)
}

// randomCluster is one drawn state, as objects both the loop and explain read.
type randomCluster struct {
	// serial names the Machines and NodeMaintenances of this cluster apart from those of
	// the one before, so that a reader that still holds those is not taken as following.
	serial     int
	cfg        *v1alpha1.Config
	now        time.Time
	nodes      []*corev1.Node
	leases     []*coordinationv1.Lease // node Leases
	identities []*coordinationv1.Lease // controller replicas' identity Leases
	pods       []*corev1.Pod
	vas        []*storagev1.VolumeAttachment
	incidents  []*v1alpha1.NodeFence
	pause      *corev1.ConfigMap
	planned    plannedObjects
	// reader is the Machines and NodeMaintenances as a maintenance.Reader follows them.
	reader *maintenance.Reader
	agents agentsSeen
}

// drawCluster draws the serial-th cluster, of two to six nodes under one policy.
func drawCluster(rng *rand.Rand, serial int) *randomCluster {
	st := &randomCluster{cfg: fixtureConfig(), now: f0.Add(time.Hour), planned: plannedObjects{}, serial: serial,
		agents: agentsSeen{gone: map[string]time.Time{}, answered: map[string]bool{}, heard: map[string]time.Time{}}}
	drawConfig(rng, st.cfg)
	for i := 1; i <= 2+rng.Intn(5); i++ {
		st.drawNode(rng, fmt.Sprintf("node-%d", i))
	}
	if rng.Intn(12) == 0 {
		st.pause = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: oncall.DefaultPauseConfigMap, Namespace: st.cfg.LeaderElection.Namespace,
			Labels: map[string]string{v1alpha1.PauseLabel: "true"}}, Data: map[string]string{"patch-night": "alice: rack 3"}}
	}
	return st
}

// drawConfig draws the policy's switches, budget and maintenance rule.
func drawConfig(rng *rand.Rand, cfg *v1alpha1.Config) {
	cfg.Paused = rng.Intn(20) == 0
	cfg.DryRun = rng.Intn(10) == 0
	if rng.Intn(2) == 0 {
		cfg.Heartbeats = &v1alpha1.Heartbeats{KubeletCheckInterval: metav1.Duration{Duration: 10 * time.Second}}
	}
	p := &cfg.Policies[0]
	p.Paused = rng.Intn(20) == 0
	p.DryRun = rng.Intn(10) == 0
	p.SkipIfNothingToRelease = rng.Intn(3) == 0
	b := &p.Budget
	switch rng.Intn(4) {
	case 0:
		b.MaxUnhealthy = nil
	case 1:
		b.MaxUnhealthy = ptr.To(intstr.FromInt32(int32(1 + rng.Intn(3))))
	default:
		b.MaxUnhealthy = ptr.To(intstr.FromString([]string{"34%", "50%", "75%"}[rng.Intn(3)]))
	}
	b.MaxConcurrent = int32(1 + rng.Intn(3))
	b.PerZone = ptr.To(rng.Intn(2) == 0)
	b.ControlPlaneOneAtATime = ptr.To(rng.Intn(2) == 0)
	b.Cooldown = metav1.Duration{Duration: time.Duration(rng.Intn(3)) * 10 * time.Minute}
	if rng.Intn(3) == 0 {
		b.RateLimit = v1alpha1.RateLimit{FencesPerMinute: int32(1 + rng.Intn(2)), Burst: int32(1 + rng.Intn(2))}
	}
	p.Maintenance.Cordoned = []v1alpha1.CordonRule{v1alpha1.CordonWhenDrained, v1alpha1.CordonAlways, v1alpha1.CordonNever}[rng.Intn(3)]
	p.Maintenance.MaxWindow = metav1.Duration{Duration: []time.Duration{30 * time.Second, 2 * time.Minute, time.Hour}[rng.Intn(3)]}
}

// ago is a time up to max before now, in whole seconds.
func (st *randomCluster) ago(rng *rand.Rand, max time.Duration) time.Time {
	return st.now.Add(-time.Duration(rng.Int63n(int64(max/time.Second)+1)) * time.Second)
}

// drawNode draws a node, its Lease, its workloads, what says it is under maintenance, a
// replica on it, its agent's heartbeats and its incidents.
func (st *randomCluster) drawNode(rng *rand.Rand, name string) {
	n := fixtureNode(name, "boot-"+name, true)
	n.Labels = map[string]string{}
	if z := rng.Intn(3); z > 0 {
		n.Labels[policy.ZoneLabel] = fmt.Sprintf("zone-%d", z)
	}
	if rng.Intn(3) == 0 {
		n.Labels[policy.ControlPlaneLabel] = ""
	}
	if rng.Intn(12) == 0 {
		n.Labels[st.cfg.Policies[0].ExcludeLabel] = "true"
	}
	status := []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionUnknown, corev1.ConditionFalse}[rng.Intn(3)]
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(st.ago(rng, 5*time.Minute))}}
	st.drawPlanned(rng, n)
	if rng.Intn(10) == 0 {
		n.Annotations[v1alpha1.TargetReadsOffAnnotation] = "the BMC read off while the node lived"
	}
	st.nodes = append(st.nodes, n)
	if rng.Intn(10) > 0 {
		st.leases = append(st.leases, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: NodeLeaseNamespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: ptr.To(metav1.NewMicroTime(st.ago(rng, 4*time.Minute)))}})
	}
	if rng.Intn(3) == 0 {
		st.pods = append(st.pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-" + name, UID: types.UID("u-" + name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "sts", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	if rng.Intn(5) == 0 {
		st.vas = append(st.vas, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-" + name},
			Spec: storagev1.VolumeAttachmentSpec{NodeName: name, Attacher: "csi.example.com", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-" + name)}}})
	}
	if rng.Intn(4) == 0 {
		st.identities = append(st.identities, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kubefence-controller-" + name, Namespace: st.cfg.LeaderElection.Namespace,
			Labels: map[string]string{v1alpha1.NodeLabel: name, leader.IdentityLabel: "true", leader.ComponentLabel: "controller"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("replica-on-" + name), RenewTime: ptr.To(metav1.NewMicroTime(st.ago(rng, 40*time.Second)))}})
	}
	if rng.Intn(3) == 0 {
		st.agents.gone[name] = st.ago(rng, 2*time.Minute)
	}
	if rng.Intn(2) == 0 {
		st.agents.heard[name] = st.ago(rng, 3*time.Minute)
	}
	st.agents.answered[name] = rng.Intn(2) == 0
	for k := range rng.Intn(3) {
		st.incidents = append(st.incidents, st.drawIncident(rng, name, k))
	}
}

// drawPlanned draws the signs of planned absence: on the Node, and the objects that name it.
func (st *randomCluster) drawPlanned(rng *rand.Rand, n *corev1.Node) {
	n.Spec.Unschedulable = rng.Intn(4) == 0
	switch rng.Intn(12) {
	case 0:
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: maintenance.AutoscalerTaint, Value: "1764000000", Effect: corev1.TaintEffectNoSchedule})
	case 1:
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: maintenance.KarpenterTaint, Effect: corev1.TaintEffectNoSchedule})
	case 2:
		n.Annotations[maintenance.KuredRebootAnnotation] = "2026-11-24T06:00:00Z"
	case 3:
		n.Labels[maintenance.ExcludeLabel] = "true"
	case 4:
		st.planned[n.Name] = maintenance.Objects{NodeMaintenance: fmt.Sprintf("nm-%s-%d", n.Name, st.serial)}
	case 5:
		st.planned[n.Name] = maintenance.Objects{DeletingMachine: fmt.Sprintf("capi/m-%s-%d", n.Name, st.serial)}
	}
}

// drawIncident draws the k-th incident of node: open in any phase, or closed after a
// verified fence, by the controller, a health checker or a person.
func (st *randomCluster) drawIncident(rng *rand.Rand, node string, k int) *v1alpha1.NodeFence {
	// Recent incidents put fences within the rate limit's window.
	opened := st.ago(rng, []time.Duration{2 * time.Minute, 20 * time.Minute}[rng.Intn(2)])
	nf := &v1alpha1.NodeFence{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-x%d", node, k), ResourceVersion: "1", CreationTimestamp: metav1.NewTime(opened),
			Labels: map[string]string{v1alpha1.NodeLabel: node}},
		Spec: v1alpha1.NodeFenceSpec{NodeName: node, Reason: "node unhealthy",
			RequestedBy: []string{v1alpha1.RequestedByController, v1alpha1.RequestedByRemediationPrefix + "nhc", "alice"}[rng.Intn(3)]},
		Status: v1alpha1.NodeFenceStatus{Policy: "default", Leader: "me"},
	}
	// A node has at most one open incident (invariant 3): its first may be in any phase,
	// the others are closed.
	phases := []v1alpha1.Phase{v1alpha1.PhaseFailed, v1alpha1.PhaseRecovered, v1alpha1.PhaseCancelled,
		v1alpha1.PhasePending, v1alpha1.PhaseHeld, v1alpha1.PhaseFencing, v1alpha1.PhaseRemediated}
	if k > 0 {
		phases = phases[:3]
	}
	nf.Status.Phase = phases[rng.Intn(len(phases))]
	if rng.Intn(2) == 0 {
		nf.Status.Timeline = append(nf.Status.Timeline, v1alpha1.Step{Type: v1alpha1.StepEvidenceStarted, Time: metav1.NewMicroTime(opened.Add(-time.Duration(rng.Intn(300)) * time.Second))})
	}
	nf.Status.Timeline = append(nf.Status.Timeline, v1alpha1.Step{Type: v1alpha1.StepDetected, Time: metav1.NewMicroTime(opened), Message: "unhealthy"})
	switch nf.Status.Phase {
	case v1alpha1.PhasePending, v1alpha1.PhaseHeld, v1alpha1.PhaseCancelled:
		return nf
	}
	started := opened.Add(time.Duration(rng.Intn(60)) * time.Second)
	nf.Status.Level = 1
	nf.Status.Timeline = append(nf.Status.Timeline, v1alpha1.Step{Type: v1alpha1.StepFenceStarted, Time: metav1.NewMicroTime(started)})
	if nf.Status.Phase != v1alpha1.PhaseFencing && nf.Status.Phase != v1alpha1.PhaseFailed {
		nf.Status.VerifiedLevel = 1
	}
	return nf
}

func (st *randomCluster) String() string {
	var b strings.Builder
	p := st.cfg.Policies[0]
	fmt.Fprintf(&b, "  now %s; paused %v, dry run %v, heartbeats %v; policy paused %v, dry run %v, skip nothing to release %v, maintenance %+v; budget maxUnhealthy %v, maxConcurrent %d, perZone %v, cp one at a time %v, cooldown %s, rate %+v; pause ConfigMap %v\n",
		st.now.Format(time.RFC3339), st.cfg.Paused, st.cfg.DryRun, st.cfg.Heartbeats != nil, p.Paused, p.DryRun, p.SkipIfNothingToRelease, p.Maintenance,
		p.Budget.MaxUnhealthy, p.Budget.MaxConcurrent, *p.Budget.PerZone, *p.Budget.ControlPlaneOneAtATime, p.Budget.Cooldown.Duration, p.Budget.RateLimit, st.pause != nil)
	for _, n := range st.nodes {
		fmt.Fprintf(&b, "  node %s labels %v annotations %v unschedulable %v taints %v ready %s since %s; planned %+v; agent gone %v, heard %v, answers %v\n",
			n.Name, n.Labels, n.Annotations, n.Spec.Unschedulable, n.Spec.Taints, n.Status.Conditions[0].Status, n.Status.Conditions[0].LastTransitionTime.Format(time.RFC3339),
			st.planned[n.Name], st.agents.gone[n.Name], st.agents.heard[n.Name], st.agents.answered[n.Name])
	}
	for _, l := range append(append([]*coordinationv1.Lease{}, st.leases...), st.identities...) {
		fmt.Fprintf(&b, "  lease %s/%s renewed %s\n", l.Namespace, l.Name, l.Spec.RenewTime.Format(time.RFC3339))
	}
	for _, p := range st.pods {
		fmt.Fprintf(&b, "  pod %s on %s\n", p.Name, p.Spec.NodeName)
	}
	for _, va := range st.vas {
		fmt.Fprintf(&b, "  attachment %s on %s\n", va.Name, va.Spec.NodeName)
	}
	for _, nf := range st.incidents {
		fmt.Fprintf(&b, "  incident %s by %s, %s, opened %s, verified %v, timeline %v\n", nf.Name, nf.Spec.RequestedBy, nf.Status.Phase,
			nf.CreationTimestamp.Format(time.RFC3339), nf.Status.Verified(), nf.Status.Timeline)
	}
	return b.String()
}

// loop is the incident loop over st, its caches and peers filled as their watches would
// fill them, each Lease seen at its renewTime.
func (st *randomCluster) loop(t *testing.T) *Controller {
	t.Helper()
	c := newLoop(t, loopParts{cfg: st.cfg, kube: fake.NewClientset(), fencing: fencingfake.NewSimpleClientset(),
		agents: plugintest.One{A: &plugintest.Machine{On: true}}, recorder: record.NewFakeRecorder(10)})
	c.now = func() time.Time { return st.now }
	add := func(idx cache.Indexer, o runtime.Object) {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	kube := c.opts.Caches.Kube
	for _, n := range st.nodes {
		add(kube.Core().V1().Nodes().Informer().GetIndexer(), n)
	}
	for _, l := range st.leases {
		add(c.opts.Caches.NodeLeases.Coordination().V1().Leases().Informer().GetIndexer(), l)
		c.detector.ObserveLease(l, l.Spec.RenewTime.Time)
	}
	for _, l := range st.identities {
		c.peers.replicas.Observe(l, l.Spec.RenewTime.Time)
	}
	for _, p := range st.pods {
		add(c.caches.pods.GetIndexer(), p)
	}
	for _, va := range st.vas {
		add(kube.Storage().V1().VolumeAttachments().Informer().GetIndexer(), va)
	}
	for _, nf := range st.incidents {
		add(nfIndexer(c), nf.DeepCopy())
	}
	inf := &handlerOnly{}
	pauses, err := oncall.NewPauses(inf, st.cfg.Paused, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.pause != nil {
		inf.h.OnAdd(st.pause, false)
	}
	c.peers.pauses = pauses
	c.peers.agents = agentsOf{NodeAgentWatch: c.peers.agents, det: c.detector, seen: st.agents}
	c.peers.maintenance = st.reader
	return c
}

// loopDecision is the decision the loop takes at now for node's open incident, or for
// the incident it would open for it (a controller's, Pending): the view a sync takes
// (the node agents' verdict passed on first, the kubelet probed when the detector asks)
// and the decision a Pending or Held incident gets.
func loopDecision(t *testing.T, c *Controller, name string, now time.Time) string {
	t.Helper()
	node, err := c.caches.nodes.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Select(c.cfg.Policies, node.Labels)
	if err != nil || pol == nil {
		t.Fatalf("policy of %s: %v %v", name, pol, err)
	}
	c.peers.agents.ObserveAgent(name)
	pn, obs := c.sources().View(pol, node, now)
	if obs.ProbeKubelet && c.peers.agents.ProbeKubelet(context.Background(), node, now) {
		pn, obs = c.sources().View(pol, node, now)
	}
	nf, err := c.store.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if nf == nil {
		nf = &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: name, RequestedBy: v1alpha1.RequestedByController}}
	}
	d, err := c.decision(pol, pn, node, nf, now)
	if err != nil {
		t.Fatal(err)
	}
	// A decision's claim on the budget is this check's alone.
	*c.decide.admission = nodeview.Admission{}
	return fmt.Sprintf("%s %s: %s", d.Verdict, d.Reason, d.Message)
}

// explain is the decision `fence-controller explain` states for node, from st as the API
// server holds it.
func (st *randomCluster) explain(t *testing.T, node string) string {
	t.Helper()
	var kubeObjs, nfObjs []runtime.Object
	for _, n := range st.nodes {
		kubeObjs = append(kubeObjs, n)
	}
	for _, l := range append(append([]*coordinationv1.Lease{}, st.leases...), st.identities...) {
		kubeObjs = append(kubeObjs, l)
	}
	for _, p := range st.pods {
		kubeObjs = append(kubeObjs, p)
	}
	for _, va := range st.vas {
		kubeObjs = append(kubeObjs, va)
	}
	if st.pause != nil {
		kubeObjs = append(kubeObjs, st.pause)
	}
	for _, nf := range st.incidents {
		nfObjs = append(nfObjs, nf.DeepCopy())
	}
	e := oncall.Explainer{Config: st.cfg, Kube: fake.NewClientset(kubeObjs...), Fencing: fencingfake.NewSimpleClientset(nfObjs...),
		Now: func() time.Time { return st.now }, PauseConfigMap: oncall.DefaultPauseConfigMap, Maintenance: st.reader,
		Agents: func(d *detector.Detector) nodeview.Agents { return agentsOf{det: d, seen: st.agents} }}
	var out bytes.Buffer
	if err := e.Explain(context.Background(), node, &out); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if rule, ok := strings.CutPrefix(line, "rule now:  "); ok {
			return rule
		}
	}
	t.Fatalf("explain of %s states no rule:\n%s", node, out.String())
	return ""
}

// handlerOnly is an informer that only takes a handler, which the test calls as the
// watch would.
type handlerOnly struct {
	cache.SharedIndexInformer
	h cache.ResourceEventHandler
}

func (i *handlerOnly) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	i.h = h
	return nil, nil
}

// plannedObjects are the Machines and NodeMaintenances that name each node.
type plannedObjects map[string]maintenance.Objects

// The kinds a maintenance.Reader follows, as the API server serves them here.
var (
	machinesGVR        = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"}
	nodeMaintenanceGVR = schema.GroupVersionResource{Group: "nodemaintenance.medik8s.io", Version: "v1beta1", Resource: "nodemaintenances"}
)

// plannedReader is a maintenance.Reader following a fake API server's Machines and
// NodeMaintenances, which hold replaces.
type plannedReader struct {
	client *dynamicfake.FakeDynamicClient
	reader *maintenance.Reader
}

// servedKinds serves the Machines and NodeMaintenances.
type servedKinds struct{}

func (servedKinds) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	for _, gvr := range []schema.GroupVersionResource{machinesGVR, nodeMaintenanceGVR} {
		if gvr.GroupVersion().String() == gv {
			return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: gvr.Resource}}}, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: gv}, "")
}

func newPlannedReader(t *testing.T) *plannedReader {
	t.Helper()
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{machinesGVR: "MachineList", nodeMaintenanceGVR: "NodeMaintenanceList"})
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	r, err := maintenance.New(servedKinds{}, factory)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return &plannedReader{client: client, reader: r}
}

// hold makes the API server hold the objects of planned, and no other, and returns the
// reader once it follows them.
func (p *plannedReader) hold(t *testing.T, planned plannedObjects) *maintenance.Reader {
	t.Helper()
	ctx := context.Background()
	for _, gvr := range []schema.GroupVersionResource{machinesGVR, nodeMaintenanceGVR} {
		list, err := p.client.Resource(gvr).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range list.Items {
			if err := p.client.Resource(gvr).Namespace(u.GetNamespace()).Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for node, o := range planned {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		gvr, path := nodeMaintenanceGVR, []string{"spec", "nodeName"}
		u.SetKind("NodeMaintenance")
		u.SetName(o.NodeMaintenance)
		if ns, name, ok := strings.Cut(o.DeletingMachine, "/"); ok {
			gvr, path = machinesGVR, []string{"status", "nodeRef", "name"}
			u.SetKind("Machine")
			u.SetNamespace(ns)
			u.SetName(name)
			u.SetDeletionTimestamp(ptr.To(metav1.NewTime(f0)))
		}
		u.SetAPIVersion(gvr.GroupVersion().String())
		if err := unstructured.SetNestedField(u.Object, node, path...); err != nil {
			t.Fatal(err)
		}
		if _, err := p.client.Resource(gvr).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for i := 1; i <= 6; i++ {
			node := fmt.Sprintf("node-%d", i)
			if p.reader.Objects(node) != planned[node] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the maintenance reader never followed %v: %v", planned, err)
	}
	return p.reader
}

// agentsSeen is what a seat among the node agents' peers knows: since when each node's
// agent is gone, when its kubelet last answered a routine check, and whether it answers
// a probe now.
type agentsSeen struct {
	gone     map[string]time.Time
	heard    map[string]time.Time
	answered map[string]bool
}

// agentsOf passes agentsSeen on to a detector, as nodeagentwatch.Watch passes its seat's.
type agentsOf struct {
	NodeAgentWatch
	det  *detector.Detector
	seen agentsSeen
}

func (a agentsOf) ObserveAgent(node string) {
	if at, ok := a.seen.heard[node]; ok {
		a.det.ObserveKubeletCheck(node, at, true)
	}
	at, gone := a.seen.gone[node]
	a.det.ObserveAgent(node, at, gone)
}

func (a agentsOf) ProbeKubelet(_ context.Context, node *corev1.Node, now time.Time) bool {
	a.det.ObserveKubeletProbe(node.Name, now, a.seen.answered[node.Name])
	return true
}
