package podrelease

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
)

// OwnerAnnotation, on a node, names the incident whose release added taints to it, and
// their keys: "<incident>=<key>,<key>". It is written in the same update as each taint
// kubefence adds, so the taint says whose it is on the node itself, even when the
// incident's record of it was lost (the replica that added it crashed or lost the lead
// before its next save). Recovery removes it with the taints.
const OwnerAnnotation = "fencing.kubefence.io/taints"

// Owned returns the taint keys the node's owner mark gives to incident: none when the
// mark names another incident or there is none.
func Owned(node *corev1.Node, incident string) []string {
	name, keys, ok := strings.Cut(node.Annotations[OwnerAnnotation], "=")
	if !ok || name != incident || keys == "" {
		return nil
	}
	return strings.Split(keys, ",")
}

// ownedOnNode is what incident owns among the taints on the node: what its mark gives it,
// and what its record names. A key recorded but not on the node is left out, so that a
// taint somebody else adds later is not claimed.
func ownedOnNode(node *corev1.Node, incident string, rem *v1alpha1.Remediation) []string {
	marked := Owned(node, incident)
	var keys []string
	for _, t := range node.Spec.Taints {
		if (slices.Contains(marked, t.Key) || slices.Contains(rem.TaintsAdded, t.Key)) && !slices.Contains(keys, t.Key) {
			keys = append(keys, t.Key)
		}
	}
	return keys
}

// setOwned marks keys as incident's on node (the copy about to be written), replacing a
// mark another incident left; no keys removes the mark.
func setOwned(node *corev1.Node, incident string, keys []string) {
	if len(keys) == 0 {
		delete(node.Annotations, OwnerAnnotation)
		return
	}
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[OwnerAnnotation] = OwnerMark(incident, keys)
}

// OwnerMark is the value of OwnerAnnotation that gives keys to incident.
func OwnerMark(incident string, keys []string) string {
	return incident + "=" + strings.Join(keys, ",")
}
