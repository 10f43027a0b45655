// Package ipmi is the driver behind fence-agent-ipmi: it powers nodes off, on or
// through a verified off-then-on via their BMC, over IPMI v2 (lanplus, with ipmitool)
// or Redfish (bmclib's gofish provider), trying the protocols a request lists in order,
// and reports success only after reading the requested power state back from the BMC.
// It runs ipmitool with the password in a 0600 temporary file (-f), never on its
// command line or in its environment; Redfish verifies the BMC's TLS certificate
// unless told not to. Validate refuses parameters that use the ipmi provider when no
// ipmitool is in PATH, so that such a configuration fails at load. Failures are sorted
// into the plugin error kinds: rejected credentials or certificates and a missing
// ipmitool are permanent, a BMC that does not answer is unreachable.
package ipmi
