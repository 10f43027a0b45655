// Package iscsi is the driver behind fence-agent-iscsi: it fences a node at its iSCSI
// storage by removing the node initiator's ACL rules from every protected target and
// closing its live connections, then proves the cut by reading ACLs and sessions back.
// It persists nothing: the evidence of a Fence names exactly what it removed in a
// "removed:" line, and Unfence restores exactly that when the controller passes the
// evidence back in the "restore" parameter. Storage backends (Linux tgt via tgtadm,
// Linux LIO via its configfs tree) sit behind the small Backend interface.
package iscsi
