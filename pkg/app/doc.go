// Package app assembles the fence-controller process: flags, configuration, API clients,
// the agent host, leader election and identity Leases (pkg/leader), the health and
// metrics servers, and the controller (pkg/controller) that does the fencing. It also
// carries the one-shot commands: --validate-config, check, explain and uninstall-check.
package app
