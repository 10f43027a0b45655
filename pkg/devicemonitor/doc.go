// Package devicemonitor is the leader's fence-device monitor: it reads every node's
// first-level fence device at start and every interval (kubefence_target_up), and marks
// a node whose device reads off while the node lives (the annotation
// fencing.kubefence.io/target-reads-off, a TargetReadsOff Event, kubefence_target_reads_off):
// that device is another machine's, and the incident loop holds the node's fencing while
// the mark stands. A node whose mapping changes (its target annotation, label or
// providerID, or its systemUUID) has its devices read again at once, not at the next
// round; a device that proves another machine's (its identity is not the node's) and
// systemUUIDs several nodes share are told with Events and in the log. It keeps the last
// read of every node's devices (LastReads) for `fence-controller devices` to show. It
// writes that annotation on Nodes and Events, nothing else.
package devicemonitor
