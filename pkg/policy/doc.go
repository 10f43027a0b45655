// Package policy makes kubefence's decisions as pure functions: which policy governs a
// node, and whether an unhealthy node may be fenced now, must wait, or is held because the
// disruption budget forbids it. It does no I/O and takes the time as an argument.
package policy
