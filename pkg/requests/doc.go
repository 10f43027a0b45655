// Package requests carries the health checkers' remediation requests
// (KubefenceRemediation, the external remediation contract NodeHealthCheck and Cluster
// API's MachineHealthCheck use): it finds the node a request names, asks the incident
// loop to open an incident for it (by adding the node to the loop's queue, which pkg/app
// makes and hands to both) (or joins the node's open one), says when a request was
// withdrawn, and mirrors the incident's progress into the request's status and
// conditions. It writes KubefenceRemediation status and nothing else; the incident loop
// opens and drives the NodeFences.
package requests
