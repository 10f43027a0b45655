// Package tgt runs a real user-space iSCSI target (Linux tgt's tgtd) for tests and the
// simulated cluster: one tgtd per Server on a free port of 127.0.0.1 with a control port
// of its own, targets with file-backed LUNs, and ACLs bound with tgtadm. It also drives
// libiscsi's user-space initiator, so a test observes from the initiator's side whether
// a login succeeds and whether a running I/O loop survives, rather than trusting what a
// fence agent reports.
package tgt
