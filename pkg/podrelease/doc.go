// Package podrelease releases a fenced node's workloads and undoes that when the node
// returns: the out-of-service taint, the DisruptionTarget condition and force deletion of
// the node's pods, and deletion of its VolumeAttachments. Every entry point refuses to act
// unless the incident records a verified fence (safety invariant 1), and only the taint
// kubefence added is ever removed (invariant 6). It also marks an unreachable node's pods
// with the NodeUnreachable condition (MarkUnreachable), so that users see why they are
// stuck long before they are released. The health checkers' remediation requests
// (KubefenceRemediation) are pkg/requests', not this package's.
package podrelease
