// Package releasegate lets a storm's releases go before their records. In a storm the
// API server is what every incident waits for, and the write that records a release
// (Remediated, with its Event) does nothing for the workloads: they were released by the
// taints and deletions before it. So while many nodes are fencing (the incident loop
// says when), an incident whose release is done holds its record back while other
// incidents of this replica are on their way to theirs, for at most Gate.Max, and never
// while a node waits for a worker. The worker keeps the node meanwhile: no other sync of
// it starts, and the record goes out with the same resourceVersion a save at once would
// have had.
//
// The bound it never crosses: the record of a release trails it by at most Gate.Max,
// however long the others take. A replica deposed meanwhile writes nothing: the save
// follows a Lease check as every save does, and the new leader resumes from the status
// written ahead of the agent call, which this never delays. The gate owns its counts of
// busy syncs and held records; it writes nothing.
package releasegate
