package netfence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// Resource is csi-addons' NetworkFence, cluster-scoped.
var Resource = schema.GroupVersionResource{Group: "csiaddons.openshift.io", Version: "v1alpha1", Resource: "networkfences"}

// What csi-addons writes and reads (kubernetes-csi-addons, api/csiaddons/v1alpha1).
const (
	stateFenced   = "Fenced"
	stateUnfenced = "Unfenced"
	resultOK      = "Succeeded"
	resultFailed  = "Failed"
	// unfencedMessage is the message csi-addons writes once the driver unfenced: result
	// stays Succeeded from the fence before it, so the message is what tells them apart.
	unfencedMessage = "unfencing operation successful"
)

// Labels on every NetworkFence kubefence creates: whose it is, and for which node, agent
// and incident. Values longer than a label allows are cut and given a hash.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "kubefence"
	NodeLabel      = "fencing.kubefence.io/node"
	AgentLabel     = "fencing.kubefence.io/agent"
	IncidentLabel  = "fencing.kubefence.io/incident"
	// IncidentAnnotation carries the incident's whole name: the label's value is cut and
	// hashed when the name is longer than a label allows.
	IncidentAnnotation = "fencing.kubefence.io/incident"
)

// Config is one NetworkFence agent, as configured (v1alpha1.NetworkFence).
type Config struct {
	// Name is the agent's name in policies.
	Name string
	// Driver, Parameters and SecretNamespace/SecretName fill spec.driver,
	// spec.parameters and spec.secret; ClassName fills spec.networkFenceClassName.
	Driver, ClassName           string
	Parameters                  map[string]string
	SecretNamespace, SecretName string
	// PollInterval is how often Unfence reads the object back while csi-addons works;
	// default 500ms.
	PollInterval time.Duration
}

// Agent is a plugin.Agent whose device is the API server's NetworkFence objects.
type Agent struct {
	client dynamic.NamespaceableResourceInterface
	// incidents reads NodeFences: an Unfence leaves alone a fence another incident that
	// is still open made.
	incidents dynamic.NamespaceableResourceInterface
	cfg       Config
}

// New is the NetworkFence agent cfg, writing through client. With a nil client (a
// configuration checked with no cluster) Validate has nothing to ask and every other
// call fails.
func New(client dynamic.Interface, cfg Config) *Agent {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	a := &Agent{cfg: cfg}
	if client != nil {
		a.client, a.incidents = client.Resource(Resource), client.Resource(v1alpha1.NodeFenceResource)
	}
	return a
}

// errNoClient is every call's answer from an agent made without an API client.
func (a *Agent) errNoClient() error {
	return plugin.Errorf(plugin.KindPermanent, "agent %s: no API client: a NetworkFence agent runs in the controller", a.cfg.Name)
}

// ObjectName is the NetworkFence agent keeps for an incident of node and its CIDRs:
// kubefence-<incident>-<hash of agent, incident and CIDRs>, the incident's name cut when
// it is too long (the node's name when there is no incident). One object per agent, so
// that two drivers fencing one node (RBD and CephFS) never read each other's result; per
// incident, so that a fence an earlier incident left in place (its level not verified, its
// node never recovered through kubefence) is never taken for this one's, since
// csi-addons' status carries no generation to tell; per set of CIDRs, so that a node
// whose addresses changed gets a fence for the new ones.
func ObjectName(agent, node, incident string, cidrs []string) string {
	const prefix, maxName = "kubefence-", 253
	sorted := slices.Sorted(slices.Values(cidrs))
	sum := sha256.Sum256([]byte(agent + "\x00" + incident + "\x00" + strings.Join(sorted, ",")))
	suffix := "-" + hex.EncodeToString(sum[:4])
	base := incident
	if base == "" {
		base = node
	}
	if len(prefix)+len(base)+len(suffix) > maxName {
		base = strings.TrimRight(base[:maxName-len(prefix)-len(suffix)], ".-")
	}
	return prefix + base + suffix
}

func (a *Agent) Describe(context.Context) (plugin.Description, error) {
	return plugin.Description{Name: a.cfg.Name, Version: "csiaddons.openshift.io/v1alpha1 NetworkFence", Actions: []plugin.Action{plugin.ActionOff}}, nil
}

// Validate checks that the API server serves NetworkFences: without csi-addons'
// CRD nothing could ever be fenced.
func (a *Agent) Validate(ctx context.Context, params map[string]string) error {
	if len(params) > 0 {
		return plugin.Errorf(plugin.KindPermanent, "agent %s: a NetworkFence agent takes no params", a.cfg.Name)
	}
	if a.client == nil {
		return nil
	}
	if _, err := a.client.List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return plugin.Errorf(plugin.KindRetryable, "agent %s: list %s: %v (is csi-addons installed, and may kubefence's ClusterRole use NetworkFences?)", a.cfg.Name, Resource.GroupResource(), err)
	}
	return nil
}

// Fence creates node's NetworkFence, Fenced, for the CIDRs req.Target names, or finds
// it there. It returns what the object says now: fenced only once csi-addons says so.
func (a *Agent) Fence(ctx context.Context, req plugin.Request, _ plugin.Action) (plugin.Result, error) {
	name, cidrs, obj, err := a.lookup(ctx, req)
	if err != nil {
		return plugin.Result{}, err
	}
	if obj == nil {
		created, err := a.client.Create(ctx, a.object(name, req.Node, req.Incident, cidrs), metav1.CreateOptions{})
		if err != nil {
			return plugin.Result{}, plugin.Errorf(plugin.KindRetryable, "create NetworkFence %s: %v", name, err)
		}
		return read(created), nil
	}
	switch state := specOf(obj).state; {
	case obj.GetDeletionTimestamp() != nil:
		return plugin.Result{}, plugin.Errorf(plugin.KindRetryable, "NetworkFence %s of an earlier incident is being deleted; a new one is created once it is gone", name)
	case state != stateFenced:
		// An earlier unfence stopped between its two steps. Its status cannot tell a new
		// fence from the old one: it is deleted and a fresh one made on the next try.
		err := a.client.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptrUID(obj.GetUID())}})
		if err != nil && !apierrors.IsNotFound(err) {
			return plugin.Result{}, plugin.Errorf(plugin.KindRetryable, "delete NetworkFence %s left %s by an earlier unfence: %v", name, state, err)
		}
		return plugin.Result{}, plugin.Errorf(plugin.KindRetryable, "NetworkFence %s was left %s by an earlier unfence; deleted, a new one is created on the next try", name, state)
	}
	return read(obj), nil
}

// Status reads node's NetworkFence back: off (fenced) when it is Fenced for every CIDR
// of req.Target and csi-addons reports the driver succeeded; on when there is none, or
// it was unfenced; unknown while csi-addons has not answered.
func (a *Agent) Status(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	name, _, obj, err := a.lookup(ctx, req)
	if err != nil {
		return plugin.Result{}, err
	}
	if obj == nil {
		return plugin.Result{State: plugin.StateOn, Evidence: fmt.Sprintf("no NetworkFence %s: node %s's storage access is not fenced", name, req.Node)}, nil
	}
	res := read(obj)
	if st := statusOf(obj); st.result == resultFailed && specOf(obj).state == stateFenced {
		// csi-addons retries with a backoff; until the level's deadline this is not final.
		return res, plugin.Errorf(plugin.KindRetryable, "%s", res.Evidence)
	}
	return res, nil
}

// lookup reads the NetworkFence this agent keeps for req's incident and CIDRs: its
// name, the CIDRs, and the object (nil when there is none). One kubefence did not create
// for them is an error.
func (a *Agent) lookup(ctx context.Context, req plugin.Request) (string, []string, *unstructured.Unstructured, error) {
	if a.client == nil {
		return "", nil, nil, a.errNoClient()
	}
	cidrs, err := ParseTarget(req.Target)
	if err != nil {
		return "", nil, nil, plugin.Errorf(plugin.KindPermanent, "agent %s: node %s: %v", a.cfg.Name, req.Node, err)
	}
	name := ObjectName(a.cfg.Name, req.Node, req.Incident, cidrs)
	obj, err := a.client.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return name, cidrs, nil, nil
	case err != nil:
		return name, cidrs, nil, plugin.Errorf(plugin.KindRetryable, "get NetworkFence %s: %v", name, err)
	}
	if err := a.ours(obj, req); err != nil {
		return name, cidrs, nil, err
	}
	return name, cidrs, obj, nil
}

// Unfence sets the NetworkFences this agent keeps for the node Unfenced, waits until
// csi-addons reports the driver unfenced each, then deletes them. Called only after the
// node's new boot, for req's incident: its own fences, and those incidents that have
// ended left in place (a level that was never verified), never one another incident
// still open made. A paused leader's late Unfence must not lift the fence its
// successor's new incident holds. One another agent, or not kubefence, created is not
// listed, so never touched.
func (a *Agent) Unfence(ctx context.Context, req plugin.Request) (plugin.Result, error) {
	if a.client == nil {
		return plugin.Result{}, a.errNoClient()
	}
	list, err := a.client.List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{
		ManagedByLabel: ManagedBy, NodeLabel: v1alpha1.LabelValue(req.Node), AgentLabel: v1alpha1.LabelValue(a.cfg.Name)}).String()})
	if err != nil {
		return plugin.Result{}, plugin.Errorf(plugin.KindRetryable, "list NetworkFences of node %s: %v", req.Node, err)
	}
	var evidence []string
	for i := range list.Items {
		obj := &list.Items[i]
		why, err := a.leaveAlone(ctx, obj, req)
		if err != nil {
			return plugin.Result{State: plugin.StateUnknown, Evidence: strings.Join(evidence, "; ")}, err
		}
		if why != "" {
			evidence = append(evidence, fmt.Sprintf("NetworkFence %s left in place: %s", obj.GetName(), why))
			continue
		}
		ev, err := a.unfence(ctx, obj)
		evidence = append(evidence, ev)
		if err != nil {
			return plugin.Result{State: plugin.StateUnknown, Evidence: strings.Join(evidence, "; ")}, err
		}
	}
	if len(evidence) == 0 {
		return plugin.Result{State: plugin.StateOn, Evidence: fmt.Sprintf("no NetworkFence of node %s: nothing to unfence", req.Node)}, nil
	}
	return plugin.Result{State: plugin.StateOn, Evidence: strings.Join(evidence, "; ")}, nil
}

// leaveAlone says why an Unfence for req must not touch obj, "" when it may: obj is
// req's incident's, or that of an incident that has ended or is gone. One made before
// objects carried IncidentAnnotation names its incident by label only, which is cut for
// a long name: when no incident has that name, it is left for a person.
func (a *Agent) leaveAlone(ctx context.Context, obj *unstructured.Unstructured, req plugin.Request) (string, error) {
	named, label := obj.GetAnnotations()[IncidentAnnotation], obj.GetLabels()[IncidentLabel]
	if named == req.Incident || (named == "" && label == v1alpha1.LabelValue(req.Incident)) {
		return "", nil
	}
	incident := named
	if incident == "" {
		incident = label
	}
	if incident == "" {
		return "it names no incident; a person checks it", nil
	}
	nf, err := a.incidents.Get(ctx, incident, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && named != "":
		return "", nil
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("no incident is named %q, its label, which may be a long name cut; a person checks it", incident), nil
	case err != nil:
		return "", plugin.Errorf(plugin.KindRetryable, "read incident %s of NetworkFence %s: %v", incident, obj.GetName(), err)
	}
	if phase, _, _ := unstructured.NestedString(nf.Object, "status", "phase"); v1alpha1.Phase(phase).Open() {
		return fmt.Sprintf("incident %s, which made it, is still open (phase %q)", incident, phase), nil
	}
	return "", nil
}

// unfence sets obj Unfenced, waits for csi-addons to report it done, and deletes it.
func (a *Agent) unfence(ctx context.Context, obj *unstructured.Unstructured) (string, error) {
	name := obj.GetName()
	if obj.GetDeletionTimestamp() == nil && specOf(obj).state != stateUnfenced {
		// A merge patch: an update would send spec.secret, which csi-addons' CRD holds
		// immutable even when empty.
		patch := []byte(`{"spec":{"fenceState":"` + stateUnfenced + `"}}`)
		var err error
		if obj, err = a.client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return describe(obj), plugin.Errorf(plugin.KindRetryable, "set NetworkFence %s Unfenced: %v", name, err)
		}
	}
	var last statusFields
	err := wait.PollUntilContextCancel(ctx, a.cfg.PollInterval, true, func(ctx context.Context) (bool, error) {
		cur, err := a.client.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			last = statusFields{message: unfencedMessage}
			return true, nil
		}
		if err != nil {
			return false, nil
		}
		obj, last = cur, statusOf(cur)
		return last.message == unfencedMessage || last.result == resultFailed, nil
	})
	switch {
	case err != nil:
		return describe(obj), plugin.Errorf(plugin.KindRetryable, "NetworkFence %s: csi-addons has not reported the unfence (%s): %v", name, describe(obj), err)
	case last.result == resultFailed:
		return describe(obj), plugin.Errorf(plugin.KindRetryable, "NetworkFence %s: the driver failed to unfence: %s", name, last.message)
	}
	err = a.client.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptrUID(obj.GetUID())}})
	if err != nil && !apierrors.IsNotFound(err) {
		return describe(obj), plugin.Errorf(plugin.KindRetryable, "delete unfenced NetworkFence %s: %v", name, err)
	}
	return describe(obj) + "; deleted", nil
}

// object is the NetworkFence for an incident of node, Fenced for cidrs.
func (a *Agent) object(name, node, incident string, cidrs []string) *unstructured.Unstructured {
	spec := map[string]any{"fenceState": stateFenced, "cidrs": toAny(cidrs)}
	if a.cfg.ClassName != "" {
		spec["networkFenceClassName"] = a.cfg.ClassName
	} else {
		spec["driver"] = a.cfg.Driver
	}
	if len(a.cfg.Parameters) > 0 {
		params := map[string]any{}
		for k, v := range a.cfg.Parameters {
			params[k] = v
		}
		spec["parameters"] = params
	}
	if a.cfg.SecretName != "" {
		spec["secret"] = map[string]any{"namespace": a.cfg.SecretNamespace, "name": a.cfg.SecretName}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(Resource.GroupVersion().String())
	u.SetKind("NetworkFence")
	u.SetName(name)
	u.SetLabels(map[string]string{ManagedByLabel: ManagedBy, NodeLabel: v1alpha1.LabelValue(node),
		AgentLabel: v1alpha1.LabelValue(a.cfg.Name), IncidentLabel: v1alpha1.LabelValue(incident)})
	u.SetAnnotations(map[string]string{IncidentAnnotation: incident})
	return u
}

// ours refuses a NetworkFence kubefence did not create for this agent and req's node
// and incident (the name is taken by someone else's, or names were cut alike).
func (a *Agent) ours(obj *unstructured.Unstructured, req plugin.Request) error {
	l := obj.GetLabels()
	if l[ManagedByLabel] != ManagedBy || l[NodeLabel] != v1alpha1.LabelValue(req.Node) || l[AgentLabel] != v1alpha1.LabelValue(a.cfg.Name) ||
		l[IncidentLabel] != v1alpha1.LabelValue(req.Incident) {
		return plugin.Errorf(plugin.KindPermanent, "NetworkFence %s is not kubefence's agent %s's for node %s, incident %q (labels %v): kubefence never changes a NetworkFence it did not create",
			obj.GetName(), a.cfg.Name, req.Node, req.Incident, l)
	}
	return nil
}

// read says what obj shows: fenced once csi-addons reports the driver fenced its CIDRs,
// which its name says are the ones asked for.
func read(obj *unstructured.Unstructured) plugin.Result {
	spec, st := specOf(obj), statusOf(obj)
	res := plugin.Result{State: plugin.StateUnknown, Evidence: describe(obj)}
	switch {
	case spec.state == stateFenced && st.result == resultOK && obj.GetDeletionTimestamp() == nil:
		res.State = plugin.StateOff
	case spec.state == stateUnfenced && st.message == unfencedMessage:
		res.State = plugin.StateOn
	}
	return res
}

type specFields struct {
	state string
	cidrs []string
}

type statusFields struct{ result, message string }

func specOf(obj *unstructured.Unstructured) specFields {
	state, _, _ := unstructured.NestedString(obj.Object, "spec", "fenceState")
	cidrs, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "cidrs")
	return specFields{state: state, cidrs: cidrs}
}

func statusOf(obj *unstructured.Unstructured) statusFields {
	result, _, _ := unstructured.NestedString(obj.Object, "status", "result")
	message, _, _ := unstructured.NestedString(obj.Object, "status", "message")
	return statusFields{result: result, message: message}
}

// describe is the evidence a NetworkFence gives, in words a person can check.
func describe(obj *unstructured.Unstructured) string {
	spec, st := specOf(obj), statusOf(obj)
	driver, _, _ := unstructured.NestedString(obj.Object, "spec", "driver")
	if class, _, _ := unstructured.NestedString(obj.Object, "spec", "networkFenceClassName"); class != "" {
		driver = "class " + class
	}
	s := fmt.Sprintf("NetworkFence %s (uid %s, %s) %s for %s", obj.GetName(), obj.GetUID(), driver, spec.state, strings.Join(spec.cidrs, ","))
	if st.result == "" {
		return s + ": no result from csi-addons yet"
	}
	return fmt.Sprintf("%s: csi-addons result %s: %s", s, st.result, st.message)
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func ptrUID(u types.UID) *types.UID { return &u }
