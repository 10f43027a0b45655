// Package nodeview is the incident loop's view of a node and its decision on it, computed
// once for both of their callers: the loop (pkg/controller) from its caches and peers, and
// `fence-controller explain` (pkg/oncall) from one read of the API server. A view is the
// node as policy sees it (its workloads, its health judged by the detector with its own
// thresholds, what says it is under maintenance, a controller replica on it, its
// incidents); a decision is policy's verdict on its incident with the rest of the
// cluster surveyed. Each caller hands it Sources; it reads nothing else and writes
// nothing. Admission is the loop's lock over a decision and its claim on the fencing
// budget; DryRunReports says which dry-run decisions the loop has reported.
package nodeview
