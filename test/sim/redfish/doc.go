// Package redfish runs a stateful Redfish service for tests and the simulated cluster:
// the endpoints that gofish v0.20.0 and bmclib v2.3.5's redfish provider call for power
// control (service root, SessionService sessions, the Systems collection, each
// ComputerSystem's PowerState and its ComputerSystem.Reset action), over TLS with a
// certificate from a CA generated in Go, behind basic and session (X-Auth-Token) auth.
// Each system keeps its power state and a timestamped power log, so a test checks what
// the BMC did rather than what a client reported. IgnorePowerOff makes a broken BMC that
// acknowledges power-off and does nothing; TransitionDelay keeps a system PoweringOn or
// PoweringOff for a while before the change takes effect.
package redfish
