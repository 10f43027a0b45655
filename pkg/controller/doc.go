// Package controller wires kubefence together: informers for Nodes, node Leases and
// NodeFences feed a work queue keyed by node name; each sync asks the detector about the
// node, the policy whether to act, drives the incident's fencer state machine through the
// agent plugins, and persists every step in the NodeFence status with optimistic
// concurrency and the leader's fencing epoch. It also runs leader election, metrics and
// the health endpoints.
package controller
