// Package nodeagent is the node agent of kubefence (cmd/fence-node-agent), one per node:
// it reads the open NodeFences from the API server with quorum reads, feeds the node's
// watchdog while selffence.Live allows, and reports the watchdog, its boot and the
// NodeFences it holds in a Lease of its own, from which the controller decides whether
// the node's watchdog can be counted on (selffence.Verify).
package nodeagent
