// Package detector turns Node and node Lease informer events into a health observation
// per node: healthy, or unhealthy since a time, with the evidence. It measures Lease
// staleness on the controller's own clock (when it last saw the renewTime change), so a
// node's skewed clock can neither hide nor fake a dead kubelet. It only observes.
package detector
