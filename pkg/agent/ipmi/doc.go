// Package ipmi is the driver behind fence-agent-ipmi: it powers nodes off, on or
// through a verified off-then-on via their BMC's IPMI v2 (lanplus) interface, and
// reports success only after reading the requested chassis state back from the BMC.
// It runs ipmitool with the password in a 0600 temporary file (-f), never on its
// command line or in its environment, and sorts failures into the plugin error kinds:
// rejected credentials are permanent, a BMC that does not answer is unreachable.
package ipmi
