// Package agentkit is the skeleton the fence agents under pkg/fenceagent share, so that
// each agent holds only what talks to its device: the Base an agent embeds for Describe
// and for refusing an action it does not take; the Validator an agent embeds when its
// params are all that Validate checks; Apply, the last step of every agent's New;
// Power, the off, on and off-then-on dispatch over an agent's Ensure; PollUntil, the
// verify-by-reading-back loop with its deadline rules; Evidence, the timestamped record
// of a call, scrubbed of its secrets; Scrub and Message for the text of errors; and
// the Reader of a request's params against the specs Describe publishes, which reports
// every bad one in a single permanent error (Parsed).
// It is internal to pkg/fenceagent, so that agents stay free to change it together and
// nothing else comes to depend on it; like the agents, it imports only pkg/plugin.
package agentkit
