// Package healthcheck is kubefence's side of the external remediation contract that
// medik8s NodeHealthCheck and Cluster API's MachineHealthCheck follow. A health checker
// creates a KubefenceRemediation from a KubefenceRemediationTemplate when it finds a node
// (or machine) unhealthy; kubefence opens a NodeFence for it and mirrors the incident
// back into the request's conditions.
//
// The package is pure: which node a request names, who made it, whether it still
// stands, the NodeFence it opens and the status it shows. pkg/controller watches the
// requests and does the writes, as leader.
//
// The rules, from the contract:
//   - the node is the remediation.medik8s.io/node-name annotation (NodeHealthCheck), else
//     the owning Machine's status.nodeRef (MachineHealthCheck), else the object's name;
//   - Succeeded=True once the node was verified fenced and its workloads released;
//     Succeeded=False when kubefence gave up, so the checker escalates at once; Processing
//     is True until one of these; PermanentNodeDeletionExpected is always False;
//   - remediation.medik8s.io/nhc-timed-out stops kubefence: an incident that has called
//     no agent is cancelled, a fence under way is finished and verified;
//   - only the checker deletes the request. Deleting it never undoes a fence: the
//     NodeFence stays, and is released and recovered by its boot-ID proof as any other.
package healthcheck
