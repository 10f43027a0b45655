// Package exec is the driver behind fence-agent-exec, the compatibility agent
// that runs an existing ClusterLabs fence_* script (fence-agents) through the
// FenceAgentAPI: it writes key=value lines on the script's stdin (action=off,
// on, status, ..., plus the configured params and the secrets) and reads the
// exit code: 0 is success, and for status 0 means on and 2 means off.
//
// Secrets go on stdin only, never on the command line or in the environment;
// the script runs with a minimal environment. Fence succeeds only after the
// script's own status reads the requested state back within the deadline.
package exec
