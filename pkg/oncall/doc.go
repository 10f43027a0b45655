// Package oncall is what a person on call says to kubefence and what it answers: the
// pause requests (PauseLabel ConfigMaps) that stop new fences cluster-wide, the words a
// person sets on an incident (confirm-off, cancel) and the answer to each, and
// `fence-controller explain`. It decides; the incident loop (pkg/controller) carries
// the answers out with its Lease-guarded writes. It writes nothing itself.
package oncall
