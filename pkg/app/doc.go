// Package app assembles the fence-controller process: flags, configuration, API clients,
// the agent host, leader election and identity Leases (pkg/leader), the health and
// metrics servers, and the controllers (Assemble: the incident loop of pkg/controller and
// its peers), each made by its New and run by its Run(ctx). What several of them need (the
// clock, the leader's guard, the incident Recorder, the loop's queue, the Releaser) is
// made first, below them all, and handed down. It also
// carries the one-shot commands: --validate-config, check, explain and uninstall-check.
package app
