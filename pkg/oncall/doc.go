// Package oncall is what a person on call says to kubefence and what it answers: the
// pause requests (PauseLabel ConfigMaps) that stop new fences cluster-wide, the words a
// person sets on an incident (confirm-off, cancel) and the answer to each,
// `fence-controller explain`, and the leader's answer of its fence devices' last reads
// (Devices, `fence-controller devices`). It decides, on the signs of a node's life that
// pkg/oncall/life judges, and asks the API server what an answer waits on (whether a
// word's author may give it, whether a node is gone); the incident loop (pkg/controller)
// carries the answers out with its Lease-guarded writes. It writes nothing itself.
package oncall
