package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/netfence"
	"github.com/kubefence/kubefence/pkg/podrelease"
)

// whoami is the user name a person's word must carry (the chart's admission policies
// hold the -by annotations to it).
const whoami = `"$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')"`

// Leftover is one fence kubefence holds in place that an uninstall would leave behind:
// what stays, and the commands that remove it.
type Leftover struct {
	// What names it: "NodeFence NAME", "Node NAME", "NetworkFence NAME".
	What string
	// Stays says what stays in place, in words, one line each.
	Stays []string
	// Remove is how to remove it, one line each: a command, or a step for a person.
	Remove []string
}

// UninstallCheck lists, through the API, what kubefence still holds in place: open
// incidents, taints it added to nodes, NetworkFences it made. It writes nothing.
type UninstallCheck struct {
	Kube    kubernetes.Interface
	Fencing versioned.Interface
	// Dynamic reads csi-addons' NetworkFences; a cluster that does not serve them has none.
	Dynamic dynamic.Interface
}

// Leftovers is every fence an uninstall now would leave in place, incidents first, and
// notes on what could not be read (a NetworkFence list the role may not make).
func (c UninstallCheck) Leftovers(ctx context.Context) ([]Leftover, []string, error) {
	fences, err := c.Fencing.FencingV1alpha1().NodeFences().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list nodefences: %w", err)
	}
	nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list nodes: %w", err)
	}
	incs := fences.Items
	sort.Slice(incs, func(i, j int) bool { return incs[i].Name < incs[j].Name })
	byName := map[string]*corev1.Node{}
	for i := range nodes.Items {
		byName[nodes.Items[i].Name] = &nodes.Items[i]
	}
	var out []Leftover
	for i := range incs {
		nf := &incs[i]
		owned := ownedTaints(byName[nf.Spec.NodeName], nf)
		if nf.Status.Phase.Open() || len(owned) > 0 {
			out = append(out, incidentLeftover(nf, owned))
		}
	}
	for i := range nodes.Items {
		if l, ok := nodeLeftover(&nodes.Items[i], incs); ok {
			out = append(out, l)
		}
	}
	nfs, note, err := c.networkFences(ctx)
	if err != nil {
		return nil, nil, err
	}
	var notes []string
	if note != "" {
		notes = append(notes, note)
	}
	return append(out, nfs...), notes, nil
}

// ownedTaints is the keys of kubefence's taints on node that incident nf added: those
// its record names or the node's owner mark gives it. Empty without the node.
func ownedTaints(node *corev1.Node, nf *v1alpha1.NodeFence) []string {
	if node == nil {
		return nil
	}
	marked := podrelease.Owned(node, nf.Name)
	var keys []string
	for _, t := range node.Spec.Taints {
		if (slices.Contains(marked, t.Key) || slices.Contains(nf.Status.Remediation.TaintsAdded, t.Key)) && !slices.Contains(keys, t.Key) {
			keys = append(keys, t.Key)
		}
	}
	return keys
}

// kubefenceTaints is the keys of the taints on node that kubefence added: its own
// fenced taint always, the out-of-service taint only when an incident of the node
// recorded it or the node's owner mark names it (invariant 6: one a person added is
// theirs), and whose incidents they are.
func kubefenceTaints(node *corev1.Node, incs []v1alpha1.NodeFence) (keys, owners []string) {
	_, marked, _ := strings.Cut(node.Annotations[podrelease.OwnerAnnotation], "=")
	for _, t := range node.Spec.Taints {
		ours := t.Key == podrelease.FencedTaint.Key || slices.Contains(strings.Split(marked, ","), t.Key)
		for i := range incs {
			if incs[i].Spec.NodeName == node.Name && slices.Contains(ownedTaints(node, &incs[i]), t.Key) {
				ours = true
				if !slices.Contains(owners, incs[i].Name) {
					owners = append(owners, incs[i].Name)
				}
			}
		}
		if ours && !slices.Contains(keys, t.Key) {
			keys = append(keys, t.Key)
		}
	}
	return keys, owners
}

// nodeLeftover is node's entry when it carries taints kubefence added.
func nodeLeftover(node *corev1.Node, incs []v1alpha1.NodeFence) (Leftover, bool) {
	keys, owners := kubefenceTaints(node, incs)
	if len(keys) == 0 {
		return Leftover{}, false
	}
	whose := "no incident records adding them"
	if len(owners) > 0 {
		whose = "added by incident " + strings.Join(owners, ", ")
	}
	l := Leftover{
		What:  "Node " + node.Name,
		Stays: []string{fmt.Sprintf("taints %s (%s): nothing removes them once kubefence is gone", strings.Join(keys, ", "), whose)},
	}
	l.Remove = append(l.Remove, "once "+node.Name+" has booted again (or is gone for good):")
	for _, k := range keys {
		l.Remove = append(l.Remove, fmt.Sprintf("kubectl taint node %s %s-", node.Name, k))
	}
	if _, ok := node.Annotations[podrelease.OwnerAnnotation]; ok {
		l.Remove = append(l.Remove, fmt.Sprintf("kubectl annotate node %s %s-", node.Name, podrelease.OwnerAnnotation))
	}
	return l, true
}

// incidentLeftover is nf's entry: an open incident, or an ended one whose taints
// (owned) are still on its node.
func incidentLeftover(nf *v1alpha1.NodeFence, owned []string) Leftover {
	node, st := nf.Spec.NodeName, &nf.Status
	phase := string(st.Phase)
	if phase == "" {
		phase = "new"
	}
	l := Leftover{What: fmt.Sprintf("NodeFence %s (node %s, phase %s)", nf.Name, node, phase)}
	cancel := fmt.Sprintf("kubectl annotate --overwrite nodefence %s %s=%q %s=%s",
		nf.Name, v1alpha1.CancelAnnotation, "uninstalling kubefence", v1alpha1.CancelByAnnotation, whoami)
	switch {
	case !st.Phase.Open():
		l.Stays = append(l.Stays, fmt.Sprintf("ended %s, but node %s still carries its taints %s", phase, node, strings.Join(owned, ", ")))
		l.Remove = append(l.Remove, "remove the taints as listed under Node "+node)
	case st.Verified():
		l.Stays = append(l.Stays, verifiedStays(nf)...)
		l.Remove = append(l.Remove,
			bootAgain(nf)+" and leave kubefence installed until the incident reads Recovered:"+
				" its recovery removes its taints and undoes its fences; then run this check again",
			"or, "+node+" gone for good (the incident's fences are then not undone: remove them as listed here):",
			"kubectl delete node "+node,
			cancel)
	case len(st.Attempts) > 0:
		l.Stays = append(l.Stays, fmt.Sprintf("a fence was sent (agent %s, level %d) and is not read back yet: it may still land after the controller is gone",
			st.Attempts[len(st.Attempts)-1].Agent, st.Attempts[len(st.Attempts)-1].Level))
		l.Remove = append(l.Remove, "wait until the incident reads Fenced or Failed (kubectl get nodefence "+nf.Name+" -w), then run this check again")
	default:
		l.Stays = append(l.Stays, "nothing was fenced yet; the incident stays open, and a kubefence installed again takes it up and may fence "+node)
		l.Remove = append(l.Remove, "while the controller still runs (it carries the word out): "+cancel)
	}
	l.Stays = append(l.Stays, removedACLs(nf)...)
	return l
}

// verifiedStays says what a verified incident holds on its node.
func verifiedStays(nf *v1alpha1.NodeFence) []string {
	node, st := nf.Spec.NodeName, &nf.Status
	var out []string
	if st.ConfirmedOff != nil {
		out = append(out, fmt.Sprintf("node %s was confirmed off by %s", node, st.ConfirmedOff.By))
	}
	for _, a := range st.Attempts {
		if a.State == v1alpha1.AttemptVerified {
			power := ""
			if a.PowerState != "" {
				power = ", power " + a.PowerState
			}
			out = append(out, fmt.Sprintf("node %s was fenced at level %d by agent %s%s and stays so%s",
				node, a.Level, a.Agent, targetOf(a), power))
		}
	}
	if st.Phase == v1alpha1.PhaseRemediated {
		out = append(out, "its workloads were released; the incident waits for "+node+" to come back with a new boot")
	}
	return out
}

func targetOf(a v1alpha1.Attempt) string {
	if a.Target == "" {
		return ""
	}
	return " (device " + a.Target + ")"
}

// bootAgain is how nf's node comes back with a new boot, the proof its recovery waits
// for: powered on at the device that holds it off, or rebooted when no attempt read it
// off (a storage or network fence, a person's confirm-off).
func bootAgain(nf *v1alpha1.NodeFence) string {
	node := nf.Spec.NodeName
	for _, a := range slices.Backward(nf.Status.Attempts) {
		if a.State == v1alpha1.AttemptVerified && a.Target != "" && a.PowerState == "off" {
			return "power " + node + " on at its fence device " + a.Target + " (agent " + a.Agent + ")"
		}
	}
	return "power " + node + " on, or reboot it, at its BMC or cloud console"
}

// removedACLs lists the iSCSI ACL rules nf's fences removed: an iSCSI agent's Fence
// evidence names them on its "removed:" lines.
func removedACLs(nf *v1alpha1.NodeFence) []string {
	var out []string
	for _, a := range nf.Status.Attempts {
		for _, line := range strings.Split(a.FenceEvidence, "\n") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "removed:")
			if rest = strings.TrimSpace(rest); !ok || rest == "" || rest == "none" {
				continue
			}
			out = append(out, fmt.Sprintf("iSCSI ACL rules agent %s removed%s: %s."+
				" The incident's recovery restores them; after an uninstall, add them back by hand on the storage server"+
				" (LIO: targetcli /iscsi/TARGET/tpgN/acls create IQN, with its luns; tgt: tgtadm --lld iscsi --op bind --mode target --tid TID --initiator-name IQN or --initiator-address ADDR)",
				a.Agent, targetOf(a), rest))
		}
	}
	return out
}

// networkFences is an entry per NetworkFence kubefence made. A cluster that does not
// serve NetworkFences has none; one whose role may not list them gets a note.
func (c UninstallCheck) networkFences(ctx context.Context) ([]Leftover, string, error) {
	if c.Dynamic == nil {
		return nil, "", nil
	}
	list, err := c.Dynamic.Resource(netfence.Resource).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{netfence.ManagedByLabel: netfence.ManagedBy}).String()})
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, "", nil
	case apierrors.IsForbidden(err):
		return nil, fmt.Sprintf("NetworkFences not read (%v): see them with kubectl get networkfences -l %s=%s",
			err, netfence.ManagedByLabel, netfence.ManagedBy), nil
	case err != nil:
		return nil, "", fmt.Errorf("list networkfences: %w", err)
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool { return items[i].GetName() < items[j].GetName() })
	out := make([]Leftover, 0, len(items))
	for i := range items {
		out = append(out, networkFenceLeftover(&items[i]))
	}
	return out, "", nil
}

func networkFenceLeftover(obj *unstructured.Unstructured) Leftover {
	name := obj.GetName()
	node := obj.GetLabels()[netfence.NodeLabel]
	incident := obj.GetAnnotations()[netfence.IncidentAnnotation]
	if incident == "" {
		incident = obj.GetLabels()[netfence.IncidentLabel]
	}
	state, _, _ := unstructured.NestedString(obj.Object, "spec", "fenceState")
	cidrs, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "cidrs")
	return Leftover{
		What: "NetworkFence " + name,
		Stays: []string{fmt.Sprintf("%s for %s (node %s, incident %s): the storage cluster keeps refusing those addresses (a Ceph blocklist)",
			state, strings.Join(cidrs, ", "), node, incident)},
		Remove: []string{
			"once node " + node + " has booted again (or is gone for good), with csi-addons running:",
			fmt.Sprintf(`kubectl patch networkfence %s --type merge -p '{"spec":{"fenceState":"Unfenced"}}'`, name),
			fmt.Sprintf("then, once kubectl get networkfence %s -o jsonpath='{.status.message}' reads \"unfencing operation successful\": kubectl delete networkfence %s", name, name),
		},
	}
}

// PrintLeftovers writes the check's report to w. With force, it says that the uninstall
// goes on and leaves them in place.
func PrintLeftovers(w io.Writer, leftovers []Leftover, notes []string, force bool) error {
	var b strings.Builder
	for _, n := range notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if len(leftovers) == 0 {
		b.WriteString("kubefence holds nothing in place: no open incident, no taint it added, no NetworkFence it made.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "kubefence still holds %d fence(s) in place. Uninstalling it now leaves them in place, and nothing would undo them:\n", len(leftovers))
	for _, l := range leftovers {
		fmt.Fprintf(&b, "\n%s\n", l.What)
		for _, s := range l.Stays {
			fmt.Fprintf(&b, "  stays:  %s\n", s)
		}
		for _, r := range l.Remove {
			fmt.Fprintf(&b, "  remove: %s\n", r)
		}
	}
	if force {
		b.WriteString("\n--force: the uninstall goes on, and every fence listed above stays in place.\n")
	} else {
		b.WriteString("\nThe uninstall is refused. Remove the above and uninstall again; or go on anyway, leaving them in place," +
			" with helm uninstall --no-hooks, or after helm upgrade --reset-then-reuse-values --set uninstall.force=true.\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// RunUninstallCheck is "fence-controller uninstall-check": it prints what an uninstall
// now would leave in place and reports whether the uninstall may go on (nothing is
// left, or force).
func RunUninstallCheck(ctx context.Context, c UninstallCheck, force bool, w io.Writer) (bool, error) {
	leftovers, notes, err := c.Leftovers(ctx)
	if err != nil {
		return false, err
	}
	if err := PrintLeftovers(w, leftovers, notes, force); err != nil {
		return false, fmt.Errorf("print uninstall check: %w", err)
	}
	return len(leftovers) == 0 || force, nil
}

// uninstallClients are the check's clients for kubeconfig ("" in-cluster).
func uninstallClients(kubeconfig string) (UninstallCheck, error) {
	rc, err := restConfig(kubeconfig)
	if err != nil {
		return UninstallCheck{}, err
	}
	kube, err := kubernetes.NewForConfig(Protobuf(rc))
	if err != nil {
		return UninstallCheck{}, fmt.Errorf("kubernetes client: %w", err)
	}
	fencing, err := versioned.NewForConfig(rc)
	if err != nil {
		return UninstallCheck{}, fmt.Errorf("fencing client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return UninstallCheck{}, fmt.Errorf("dynamic client: %w", err)
	}
	return UninstallCheck{Kube: kube, Fencing: fencing, Dynamic: dyn}, nil
}
