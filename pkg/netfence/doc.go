// Package netfence is the csi-addons NetworkFence as a fencing method: an agent that
// runs inside the controller and speaks to the API server, not to a device. Fence
// creates a NetworkFence (csiaddons.openshift.io/v1alpha1) for the node's CIDRs, and
// Status reads it back: the fence holds once csi-addons reports that the CSI driver
// fenced those CIDRs (Ceph adds them to its OSD blocklist). Unfence sets it Unfenced,
// waits until csi-addons reports that done, and only then deletes it: deleting a
// NetworkFence does not unfence.
//
// It lives in the controller rather than in a plugin binary because its only peer is
// the API server the controller already talks to, with the controller's own identity
// and RBAC: a plugin would need a Kubernetes client and credentials of its own, and the
// agent contract keeps plugins free of Kubernetes (docs/networkfence.md).
//
// It keeps one object per agent, incident and set of CIDRs, named
// kubefence-<incident>-<hash> and labelled managed-by kubefence with its node, agent and
// incident; one it did not create (Rook's, a person's) is never changed or deleted.
package netfence
