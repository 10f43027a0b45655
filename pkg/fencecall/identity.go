package fencecall

import (
	"fmt"
	"io"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ExpectedIdentity is the identity node reports for the machine behind target, which an
// agent compares with its device's own before it sends anything (plugin.Request's
// ExpectIdentity): for a cloud target (a providerID, scheme://...) the instance ID that
// ends the node's spec.providerID, for any other (a BMC) the node's
// status.nodeInfo.systemUUID. "" when the node reports none: the agent then does not
// check, and says so.
func ExpectedIdentity(node *corev1.Node, target string) string {
	if scheme, _, ok := strings.Cut(target, "://"); ok && scheme != "http" && scheme != "https" {
		id := strings.TrimRight(node.Spec.ProviderID, "/")
		return id[strings.LastIndex(id, "/")+1:]
	}
	return strings.TrimSpace(node.Status.NodeInfo.SystemUUID)
}

// SharedSystemUUIDs maps each systemUUID that more than one node reports to those nodes,
// sorted: cloned VMs often keep their template's. A device's GUID then cannot tell the
// nodes apart, so the agents' check proves less for them; it is reported, not guessed.
func SharedSystemUUIDs(nodes []*corev1.Node) map[string][]string {
	by := map[string][]string{}
	for _, n := range nodes {
		if id := strings.ToLower(strings.TrimSpace(n.Status.NodeInfo.SystemUUID)); id != "" {
			by[id] = append(by[id], n.Name)
		}
	}
	for id, names := range by {
		if len(names) < 2 {
			delete(by, id)
			continue
		}
		sort.Strings(names)
	}
	return by
}

// noteShared sets each check's SharesUUID from nodes.
func noteShared(checks []TargetCheck, nodes []*corev1.Node) {
	shared := SharedSystemUUIDs(nodes)
	if len(shared) == 0 {
		return
	}
	byNode := map[string][]string{}
	for _, names := range shared {
		for _, n := range names {
			byNode[n] = names
		}
	}
	for i := range checks {
		for _, other := range byNode[checks[i].Node] {
			if other != checks[i].Node {
				checks[i].SharesUUID = append(checks[i].SharesUUID, other)
			}
		}
	}
}

// printShared writes a warning for each node of checks that shares its systemUUID.
func printShared(w io.Writer, checks []TargetCheck) error {
	seen := map[string]bool{}
	for _, tc := range checks {
		if len(tc.SharesUUID) == 0 || seen[tc.Node] {
			continue
		}
		seen[tc.Node] = true
		if _, err := fmt.Fprintf(w, "WARNING: node %s reports the same systemUUID %s as %s: a BMC's system GUID cannot tell them apart\n",
			tc.Node, tc.Expect, strings.Join(tc.SharesUUID, ", ")); err != nil {
			return err
		}
	}
	return nil
}

// IdentityText is what a check says of the device's identity against the node's, as
// `fence-controller check` and `fence-controller devices` print it.
func IdentityText(tc TargetCheck) string {
	switch {
	case tc.Identity == "" && tc.Expect == "":
		return "not checked"
	case tc.Identity == "":
		return "not checked (device reports none; node " + tc.Expect + ")"
	case tc.Expect == "":
		return tc.Identity + " (node reports none: not checked)"
	case tc.Mismatch():
		return "MISMATCH: device " + tc.Identity + ", node " + tc.Expect
	}
	return tc.Identity + " (matches the node's)"
}
