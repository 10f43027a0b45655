// Package orphans is the leader's repair of what a dead predecessor left behind, as the
// kuryr HA design asks of a leader that took over from one that died mid-step: a taint a
// closed incident recorded (in its record, or in the node's owner mark naming it) is
// removed and the repair recorded on that incident; kubefence's own taint with neither
// behind it is reported and left for a person, never guessed at. It removes taints and
// their owner marks, and writes the closed incidents' records through the process's
// incidents.Recorder, under the leader's guard, both handed down by pkg/app.
package orphans
