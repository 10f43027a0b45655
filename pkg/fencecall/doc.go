// Package fencecall is how the controller reaches its fence agents: it names a node's
// target for each agent (annotations, labels, providerID, templates, a NetworkFence's
// addresses) and refuses a target two nodes share, builds each request with the agent's
// parameters and the credentials of the node's Secret (one for all nodes, or one per
// node, labelled as kubefence's), read at each call, calls Fence, Status and Unfence within
// their deadlines, asks agents to validate their parameters, reads every node's
// first-level device for `fence-controller check`, and keeps which remote agents answer
// their health checks. It reads Secrets and Nodes and writes nothing to the API server
// but its remote agents' Leases. The fence agents themselves are pkg/fenceagent's; the
// node agents, which report to the controller, are pkg/nodeagentwatch's.
package fencecall
