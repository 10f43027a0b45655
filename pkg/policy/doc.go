// Package policy makes kubefence's decisions as pure functions: which policy governs a
// node, how long its evidence must be bad given its workloads (tolerations, disruption
// budgets), and whether an unhealthy node may be fenced now, must wait, or is held by a
// switch or the disruption budget (storm, dark zone, cooldown, control plane, concurrency,
// rate). It does no I/O and takes the time as an argument.
package policy
