// Package devicemonitor is the leader's fence-device monitor: it reads every node's
// first-level fence device at start and every interval (kubefence_target_up), and marks
// a node whose device reads off while the node lives (the annotation
// fencing.kubefence.io/target-reads-off, a TargetReadsOff Event, kubefence_target_reads_off):
// that device is another machine's, and the incident loop holds the node's fencing while
// the mark stands. It writes that annotation on Nodes and Events, nothing else.
package devicemonitor
