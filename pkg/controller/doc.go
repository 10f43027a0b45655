// Package controller is the incident loop: informers for Nodes, node Leases and
// NodeFences feed a work queue keyed by node name; each sync asks the detector about the
// node and the policy whether to act, opens an incident, drives its fencer state machine
// through the agents (pkg/fencecall), releases the node's workloads once the fence is
// verified (pkg/podrelease) and recovers the node once it is back on a new boot. It owns
// the incidents' progress and writes NodeFences (at the leader's epoch, through
// pkg/incidents), their Events, and the releases' taints, pod deletions and
// VolumeAttachment removals. It asks its peers (the health checkers' requests, the watch
// on the node agents, the remote agents' health) through their methods; pkg/app wires
// them, and hands it what it shares with them (Shared: the clock, the leader's guard, the
// incident Recorder, its own queue, the Releaser, and the Admission whose fences the
// Recorder counts to tell a storm), so that no peer calls back into it.
package controller
