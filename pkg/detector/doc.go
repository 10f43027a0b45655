// Package detector turns Node and node Lease informer events into a health observation
// per node: healthy, suspect, unhealthy since a time, flapping or deleted, with the
// evidence. It measures Lease staleness on the controller's own clock (when it last saw
// the renewTime change), so a node's skewed clock can neither hide nor fake a dead
// kubelet, damps nodes that keep failing and recovering, records reboots, and builds the
// NodeUnreachable condition for the pods of an unreachable node. It only observes.
package detector
