// Package nodeagentwatch is this replica's watch on the node agents: it follows their
// reports (the watchdog each agent arms, the incidents it holds, its peer address) and
// keeps the replica's seat among their peers (heartbeats), probing kubelets the detector
// asks about. It owns what it observed and when; it writes nothing to the API server. It
// feeds the detector what the seat and the probes saw, asks the incident loop to look
// at a node a report moves on (through the loop's queue, which pkg/app hands to both), and answers the loop's one question of the watchdog
// level: is this node's watchdog fence verified (Verdict). The node agents are
// pkg/nodeagent's process on each node; the fence agents the controller calls are
// pkg/fencecall's.
package nodeagentwatch
