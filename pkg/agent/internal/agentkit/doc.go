// Package agentkit is what the fence agents under pkg/agent share: reading a request's
// params against the specs Describe publishes, reporting every bad one in a single
// permanent error, and the Description and secret checks that are the same in each.
// It is internal to pkg/agent, so that agents stay free to change it together and
// nothing else comes to depend on it; like the agents, it imports only pkg/plugin.
package agentkit
