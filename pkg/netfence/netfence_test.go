package netfence

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
)

var (
	req = plugin.Request{Node: "node-1", Target: "10.77.0.1/32", Incident: "node-1-abc"}
	// name is agent ceph's NetworkFence for req's incident and CIDRs.
	name = ObjectName("ceph", "node-1", "node-1-abc", []string{"10.77.0.1/32"})
)

func newAgent(objs ...runtime.Object) (*Agent, *dynamicfake.FakeDynamicClient) {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{Resource: "NetworkFenceList", v1alpha1.NodeFenceResource: "NodeFenceList"}, objs...)
	return New(client, Config{Name: "ceph", Driver: "rbd.csi.ceph.com", Parameters: map[string]string{"clusterID": "c1"},
		SecretNamespace: "rook-ceph", SecretName: "rook-csi-rbd-provisioner", PollInterval: time.Millisecond}), client
}

func (a *Agent) get(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := a.client.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// answer writes status as csi-addons does once the driver answered.
func (a *Agent) answer(t *testing.T, name, result, message string) {
	t.Helper()
	obj := a.get(t, name)
	obj.Object["status"] = map[string]any{"result": result, "message": message}
	if _, err := a.client.UpdateStatus(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func networkFence(name string, labels map[string]string, state string, cidrs ...string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"driver": "rbd.csi.ceph.com", "fenceState": state, "cidrs": toAny(cidrs)}}}
	u.SetAPIVersion(Resource.GroupVersion().String())
	u.SetKind("NetworkFence")
	u.SetName(name)
	u.SetUID(types.UID("uid-" + name))
	u.SetLabels(labels)
	return u
}

var oursLabels = map[string]string{ManagedByLabel: ManagedBy, NodeLabel: "node-1", AgentLabel: "ceph", IncidentLabel: "node-1-abc"}

// TestFenceHoldsOnlyOnceCSIAddonsSaysSo: Fence creates the node's NetworkFence with the
// configured driver, parameters and Secret reference; it reads as fenced only once
// csi-addons reports Succeeded, and a Failed result is an error, not a fence.
func TestFenceHoldsOnlyOnceCSIAddonsSaysSo(t *testing.T) {
	a, _ := newAgent()
	ctx := context.Background()
	res, err := a.Fence(ctx, req, plugin.ActionOff)
	if err != nil || res.State != plugin.StateUnknown {
		t.Fatalf("Fence: %v, %v; want unknown until csi-addons answers", res, err)
	}
	obj := a.get(t, name)
	spec := obj.Object["spec"].(map[string]any)
	for field, want := range map[string]any{"driver": "rbd.csi.ceph.com", "fenceState": "Fenced"} {
		if spec[field] != want {
			t.Errorf("spec.%s = %v, want %v", field, spec[field], want)
		}
	}
	if c, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "cidrs"); strings.Join(c, ",") != "10.77.0.1/32" {
		t.Errorf("spec.cidrs %v, want [10.77.0.1/32]", c)
	}
	if s, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "secret"); s["namespace"] != "rook-ceph" || s["name"] != "rook-csi-rbd-provisioner" {
		t.Errorf("spec.secret %v, want the configured reference", s)
	}
	if p, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "parameters"); p["clusterID"] != "c1" {
		t.Errorf("spec.parameters %v, want clusterID c1", p)
	}
	if l := obj.GetLabels(); l[ManagedByLabel] != ManagedBy || l[NodeLabel] != "node-1" {
		t.Errorf("labels %v, want kubefence's for node-1", l)
	}
	if res, err := a.Status(ctx, req); err != nil || res.State != plugin.StateUnknown {
		t.Errorf("Status with no result: %v, %v; want unknown", res, err)
	}
	a.answer(t, name, resultFailed, "blocklist add failed")
	if res, err := a.Status(ctx, req); err == nil || plugin.KindOf(err) != plugin.KindRetryable || res.State == plugin.StateOff {
		t.Errorf("Status with result Failed: %v, %v; want a retryable error and no fence", res, err)
	}
	a.answer(t, name, resultOK, "fencing operation successful")
	res, err = a.Status(ctx, req)
	if err != nil || res.State != plugin.StateOff || !strings.Contains(res.Evidence, "Succeeded") {
		t.Errorf("Status after Succeeded: %v, %v; want off with the evidence", res, err)
	}
	// A wider target than the object covers is not fenced by it.
	if res, _ := a.Status(ctx, plugin.Request{Node: "node-1", Target: "10.77.0.1,10.88.0.1"}); res.State == plugin.StateOff {
		t.Errorf("Status for a CIDR the object lacks: %v, want not off", res)
	}
	// Fence again (a retry, a new leader) finds it and says so.
	if res, err := a.Fence(ctx, req, plugin.ActionOff); err != nil || res.State != plugin.StateOff {
		t.Errorf("Fence again: %v, %v; want off, found", res, err)
	}
}

// TestNewAddressesNewObject: a node whose addresses changed since its NetworkFence was
// made gets a new one for its new CIDRs, which holds only once csi-addons answers for
// it (the old one's Succeeded says nothing of them); Unfence undoes both.
func TestNewAddressesNewObject(t *testing.T) {
	old := networkFence(name, oursLabels, stateFenced, "10.77.0.1/32")
	old.Object["status"] = map[string]any{"result": resultOK, "message": "fencing operation successful"}
	a, _ := newAgent(old)
	ctx := context.Background()
	moved := plugin.Request{Node: "node-1", Target: "10.77.0.9", Incident: "node-1-abc"}
	res, err := a.Fence(ctx, moved, plugin.ActionOff)
	if err != nil || res.State != plugin.StateUnknown {
		t.Fatalf("Fence for new CIDRs: %v, %v; want a new object, unknown", res, err)
	}
	fresh := ObjectName("ceph", "node-1", "node-1-abc", []string{"10.77.0.9/32"})
	if c, _, _ := unstructured.NestedStringSlice(a.get(t, fresh).Object, "spec", "cidrs"); strings.Join(c, ",") != "10.77.0.9/32" {
		t.Errorf("new object's cidrs %v, want [10.77.0.9/32]", c)
	}
	if res, _ := a.Status(ctx, moved); res.State == plugin.StateOff {
		t.Errorf("Status for the new CIDRs before csi-addons answered: %v, want not off", res)
	}
	a.answer(t, fresh, resultOK, "fencing operation successful")
	a.answer(t, name, resultOK, unfencedMessage) // csi-addons, ahead of time: Unfence needs both done
	a.answer(t, fresh, resultOK, unfencedMessage)
	if res, err := a.Unfence(ctx, moved); err != nil || res.State != plugin.StateOn {
		t.Fatalf("Unfence: %v, %v", res, err)
	}
	for _, n := range []string{name, fresh} {
		if _, err := a.client.Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s still there after the unfence: %v", n, err)
		}
	}
}

// TestFenceReplacesAnUnfencedLeftover: an unfence that stopped between its two steps
// left the object Unfenced; its status cannot vouch for a new fence, so Fence deletes
// it and creates a fresh one on the next try.
func TestFenceReplacesAnUnfencedLeftover(t *testing.T) {
	left := networkFence(name, oursLabels, stateUnfenced, "10.77.0.1/32")
	left.Object["status"] = map[string]any{"result": resultOK, "message": "fencing operation successful"}
	a, _ := newAgent(left)
	ctx := context.Background()
	if res, err := a.Fence(ctx, req, plugin.ActionOff); err == nil || res.State == plugin.StateOff {
		t.Fatalf("Fence over an Unfenced leftover: %v, %v; want a retryable error", res, err)
	}
	if _, err := a.client.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("leftover still there: %v", err)
	}
	if res, err := a.Fence(ctx, req, plugin.ActionOff); err != nil || res.State != plugin.StateUnknown {
		t.Errorf("Fence after: %v, %v; want a fresh object, unknown", res, err)
	}
	if st := statusOf(a.get(t, name)); st.result != "" {
		t.Errorf("fresh object carries status %+v", st)
	}
}

// TestOthersNetworkFencesUntouched: a NetworkFence kubefence did not create, under its
// name or another (Rook's <node>-rbd-<namespace>, for the same CIDRs), is never changed
// or deleted: every method on a name that is not kubefence's fails, permanently.
func TestOthersNetworkFencesUntouched(t *testing.T) {
	rook := networkFence("node-1-rbd-rook-ceph", map[string]string{"cephClusterUID": "abc"}, stateFenced, "10.77.0.1/32")
	squatter := networkFence(name, map[string]string{"team": "storage"}, stateFenced, "10.77.0.1/32")
	a, client := newAgent(rook, squatter)
	ctx := context.Background()
	client.ClearActions()
	for method, call := range map[string]func() (plugin.Result, error){
		"Fence":  func() (plugin.Result, error) { return a.Fence(ctx, req, plugin.ActionOff) },
		"Status": func() (plugin.Result, error) { return a.Status(ctx, req) },
	} {
		if _, err := call(); plugin.KindOf(err) != plugin.KindPermanent || !strings.Contains(err.Error(), "not kubefence's") {
			t.Errorf("%s on a NetworkFence not kubefence's: %v, want a permanent refusal", method, err)
		}
	}
	// Unfence finds only kubefence's own: here none.
	if res, err := a.Unfence(ctx, req); err != nil || res.State != plugin.StateOn || !strings.Contains(res.Evidence, "nothing to unfence") {
		t.Errorf("Unfence with only others' NetworkFences: %v, %v; want nothing to unfence", res, err)
	}
	for _, act := range client.Actions() {
		if v := act.GetVerb(); v != "get" && v != "list" {
			t.Errorf("%s %s: kubefence wrote to a NetworkFence it did not create", act.GetVerb(), act.GetResource().Resource)
		}
	}
}

// TestUnfenceDeletesOnlyOnceUnfenced: Unfence sets the object Unfenced and deletes it
// only after csi-addons reports the driver unfenced; when that report does not come
// within the call, the object stays (deleting it would not unfence) and the call fails.
func TestUnfenceDeletesOnlyOnceUnfenced(t *testing.T) {
	fenced := networkFence(name, oursLabels, stateFenced, "10.77.0.1/32")
	fenced.Object["status"] = map[string]any{"result": resultOK, "message": "fencing operation successful"}

	t.Run("csi-addons answers", func(t *testing.T) {
		a, _ := newAgent(fenced.DeepCopy())
		done := make(chan error, 1)
		var res plugin.Result
		go func() {
			var err error
			res, err = a.Unfence(context.Background(), req)
			done <- err
		}()
		// csi-addons: the spec turned Unfenced, the driver unfenced, the status says so.
		deadline := time.Now().Add(10 * time.Second)
		for specOf(a.get(t, name)).state != stateUnfenced {
			if time.Now().After(deadline) {
				t.Fatal("Unfence never set the NetworkFence Unfenced")
			}
			time.Sleep(time.Millisecond) // polling, bounded by the deadline above
		}
		if _, err := a.client.Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Fatalf("deleted before csi-addons reported the unfence: %v", err)
		}
		a.answer(t, name, resultOK, unfencedMessage)
		if err := <-done; err != nil || res.State != plugin.StateOn {
			t.Fatalf("Unfence: %v, %v", res, err)
		}
		if _, err := a.client.Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("NetworkFence still there after the unfence: %v", err)
		}
	})
	t.Run("no answer within the call", func(t *testing.T) {
		a, _ := newAgent(fenced.DeepCopy())
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if res, err := a.Unfence(ctx, req); err == nil || res.State == plugin.StateOn {
			t.Errorf("Unfence with no answer: %v, %v; want an error", res, err)
		}
		if obj := a.get(t, name); specOf(obj).state != stateUnfenced {
			t.Errorf("fenceState %s, want Unfenced (asked, not yet done)", specOf(obj).state)
		}
	})
	t.Run("none there", func(t *testing.T) {
		a, _ := newAgent()
		if res, err := a.Unfence(context.Background(), req); err != nil || res.State != plugin.StateOn {
			t.Errorf("Unfence with no NetworkFence: %v, %v; want on, nothing to do", res, err)
		}
	})
}

func TestParseTarget(t *testing.T) {
	for target, want := range map[string]string{
		"10.77.0.1":              "10.77.0.1/32",
		"10.77.0.1/32, fd00::5":  "10.77.0.1/32,fd00::5/128",
		"10.77.0.7/24":           "10.77.0.0/24",
		"::ffff:10.77.0.1":       "10.77.0.1/32",
		"::ffff:10.77.0.1/128":   "10.77.0.1/32",
		"10.77.0.1,10.77.0.1/32": "10.77.0.1/32",
		"10.0.0.0/8":             "error: wider than /16",
		"fd00::/32":              "error: wider than /48",
		"storage-1.example.com":  "error: neither an IP address nor a CIDR",
		" , ":                    "error: names no CIDR",
		"10.77.0.1/33":           "error: neither an IP address nor a CIDR",
	} {
		got, err := ParseTarget(target)
		switch {
		case strings.HasPrefix(want, "error: "):
			if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(want, "error: ")) {
				t.Errorf("ParseTarget(%q) = %v, %v; want an error saying %q", target, got, err, strings.TrimPrefix(want, "error: "))
			}
		case err != nil || strings.Join(got, ",") != want:
			t.Errorf("ParseTarget(%q) = %v, %v; want %s", target, got, err, want)
		}
	}
}

func TestNodeTarget(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeExternalIP, Address: "10.77.0.1"},
		{Type: corev1.NodeInternalIP, Address: "fd00::1"}, {Type: corev1.NodeHostName, Address: "node-1"}}}}
	for name, tc := range map[string]struct {
		types []string
		want  string
	}{
		"internal":  {[]string{"InternalIP"}, "10.0.0.1/32,fd00::1/128"},
		"external":  {[]string{"ExternalIP"}, "10.77.0.1/32"},
		"both":      {[]string{"InternalIP", "ExternalIP"}, "10.0.0.1/32,10.77.0.1/32,fd00::1/128"},
		"none such": {[]string{"ExternalDNS"}, "error"},
	} {
		got, err := NodeTarget(node, tc.types)
		if (tc.want == "error") != (err != nil) || (err == nil && got != tc.want) {
			t.Errorf("%s: NodeTarget = %q, %v; want %s", name, got, err, tc.want)
		}
	}
}

func TestObjectName(t *testing.T) {
	one, other := []string{"10.77.0.1/32"}, []string{"10.77.0.2/32"}
	if got := ObjectName("ceph", "node-1", "node-1-abc", one); !strings.HasPrefix(got, "kubefence-node-1-abc-") || len(got) != len("kubefence-node-1-abc-")+8 {
		t.Errorf("ObjectName = %s, want kubefence-node-1-abc-<8 hex digits>", got)
	}
	for what, pair := range map[string][2]string{
		"two sets of CIDRs": {ObjectName("ceph", "node-1", "i", one), ObjectName("ceph", "node-1", "i", other)},
		"two agents":        {ObjectName("ceph-rbd", "node-1", "i", one), ObjectName("ceph-fs", "node-1", "i", one)},
		"two incidents":     {ObjectName("ceph", "node-1", "i1", one), ObjectName("ceph", "node-1", "i2", one)},
	} {
		if pair[0] == pair[1] {
			t.Errorf("%s share the name %s", what, pair[0])
		}
	}
	if ObjectName("ceph", "node-1", "i", []string{"a", "b"}) != ObjectName("ceph", "node-1", "i", []string{"b", "a"}) {
		t.Error("the order of the CIDRs changes the name")
	}
	long := strings.Repeat("n", 250)
	if a := ObjectName("ceph", long, long+"-x", one); len(a) > 253 || !strings.HasPrefix(a, "kubefence-") {
		t.Errorf("ObjectName of a long node: %q, want at most 253 characters", a)
	}
}

// TestOnlyThisIncidentsFenceCounts: a NetworkFence another incident of the node left
// Fenced and Succeeded (its level was not verified, or the node never recovered through
// kubefence) may no longer hold (Rook's unfence of the same addresses lifts Ceph's one
// blocklist entry): this incident makes its own and counts only that; the node's
// recovery unfences both, the earlier incident having ended.
func TestOnlyThisIncidentsFenceCounts(t *testing.T) {
	oldName := ObjectName("ceph", "node-1", "node-1-old", []string{"10.77.0.1/32"})
	old := networkFence(oldName, map[string]string{ManagedByLabel: ManagedBy, NodeLabel: "node-1", AgentLabel: "ceph", IncidentLabel: "node-1-old"},
		stateFenced, "10.77.0.1/32")
	old.SetAnnotations(map[string]string{IncidentAnnotation: "node-1-old"})
	old.Object["status"] = map[string]any{"result": resultOK, "message": "fencing operation successful"}
	a, _ := newAgent(old, incident("node-1-old", v1alpha1.PhaseFailed))
	ctx := context.Background()
	if res, err := a.Fence(ctx, req, plugin.ActionOff); err != nil || res.State != plugin.StateUnknown {
		t.Fatalf("Fence with an earlier incident's fence in place: %v, %v; want a fresh one, unknown", res, err)
	}
	if res, _ := a.Status(ctx, req); res.State == plugin.StateOff {
		t.Errorf("Status counted the earlier incident's fence: %v", res)
	}
	a.answer(t, name, resultOK, unfencedMessage)
	a.answer(t, oldName, resultOK, unfencedMessage)
	if res, err := a.Unfence(ctx, req); err != nil || res.State != plugin.StateOn {
		t.Fatalf("Unfence: %v, %v", res, err)
	}
	for _, n := range []string{name, oldName} {
		if _, err := a.client.Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s still there after the recovery's unfence: %v", n, err)
		}
	}
}

// TestUnfenceLeavesAnotherOpenIncidentsFence: an Unfence for one incident never lifts a
// fence another incident of the node still open made (a deposed leader's late recovery
// while its successor fences the node again), nor one whose incident it cannot name
// whole; an ended or deleted incident's leftover it unfences.
func TestUnfenceLeavesAnotherOpenIncidentsFence(t *testing.T) {
	fenced := func(incident string, annotated bool) *unstructured.Unstructured {
		o := networkFence(ObjectName("ceph", "node-1", incident, []string{"10.77.0.1/32"}),
			map[string]string{ManagedByLabel: ManagedBy, NodeLabel: "node-1", AgentLabel: "ceph", IncidentLabel: v1alpha1.LabelValue(incident)},
			stateFenced, "10.77.0.1/32")
		if annotated {
			o.SetAnnotations(map[string]string{IncidentAnnotation: incident})
		}
		o.Object["status"] = map[string]any{"result": resultOK, "message": "fencing operation successful"}
		return o
	}
	long := "node-1-" + strings.Repeat("x", 70)
	for name, tc := range map[string]struct {
		obj      *unstructured.Unstructured
		incident *unstructured.Unstructured
		lifted   bool
	}{
		"another incident, open":                        {fenced("node-1-new", true), incident("node-1-new", v1alpha1.PhaseFenced), false},
		"another incident, remediated (still open)":     {fenced("node-1-new", true), incident("node-1-new", v1alpha1.PhaseRemediated), false},
		"another incident, recovered":                   {fenced("node-1-new", true), incident("node-1-new", v1alpha1.PhaseRecovered), true},
		"another incident, deleted":                     {fenced("node-1-new", true), nil, true},
		"made before the annotation, incident open":     {fenced("node-1-new", false), incident("node-1-new", v1alpha1.PhaseFencing), false},
		"made before the annotation, name cut, unknown": {fenced(long, false), nil, false},
		"made before the annotation, this incident":     {fenced("node-1-abc", false), nil, true},
	} {
		t.Run(name, func(t *testing.T) {
			objs := []runtime.Object{tc.obj}
			if tc.incident != nil {
				objs = append(objs, tc.incident)
			}
			a, _ := newAgent(objs...)
			a.answer(t, tc.obj.GetName(), resultOK, unfencedMessage)
			res, err := a.Unfence(context.Background(), req)
			if err != nil {
				t.Fatalf("Unfence: %v", err)
			}
			_, gerr := a.client.Get(context.Background(), tc.obj.GetName(), metav1.GetOptions{})
			if lifted := apierrors.IsNotFound(gerr); lifted != tc.lifted {
				t.Errorf("lifted %t, want %t (evidence %q)", lifted, tc.lifted, res.Evidence)
			}
			if !tc.lifted && !strings.Contains(res.Evidence, "left in place") {
				t.Errorf("evidence %q does not say the fence was left in place", res.Evidence)
			}
		})
	}
}

// incident is a NodeFence as the dynamic client reads it.
func incident(name string, phase v1alpha1.Phase) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"nodeName": "node-1"},
		"status": map[string]any{"phase": string(phase)}}}
	u.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
	u.SetKind("NodeFence")
	u.SetName(name)
	return u
}

// TestTwoAgentsKeepApart: two NetworkFence agents fencing one node (RBD and CephFS) each
// count only their own object, and each unfences only its own.
func TestTwoAgentsKeepApart(t *testing.T) {
	rbd, client := newAgent()
	fs := New(client, Config{Name: "ceph-fs", Driver: "cephfs.csi.ceph.com", Parameters: map[string]string{"clusterID": "c1"},
		SecretNamespace: "rook-ceph", SecretName: "rook-csi-cephfs-provisioner", PollInterval: time.Millisecond})
	ctx := context.Background()
	if _, err := rbd.Fence(ctx, req, plugin.ActionOff); err != nil {
		t.Fatal(err)
	}
	rbd.answer(t, name, resultOK, "fencing operation successful")
	if res, err := fs.Fence(ctx, req, plugin.ActionOff); err != nil || res.State == plugin.StateOff {
		t.Errorf("the CephFS agent's Fence with only RBD's fence in place: %v, %v; want its own, not yet fenced", res, err)
	}
	if res, _ := fs.Status(ctx, req); res.State == plugin.StateOff {
		t.Errorf("the CephFS agent counted RBD's fence: %v", res)
	}
	fsName := ObjectName("ceph-fs", "node-1", "node-1-abc", []string{"10.77.0.1/32"})
	fs.answer(t, fsName, resultOK, unfencedMessage)
	if _, err := fs.Unfence(ctx, req); err != nil {
		t.Fatal(err)
	}
	if obj := rbd.get(t, name); specOf(obj).state != stateFenced {
		t.Errorf("the CephFS agent's Unfence changed RBD's fence: %s", specOf(obj).state)
	}
}
