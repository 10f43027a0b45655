// Package bmc runs simulated baseboard management controllers for tests and the
// simulated cluster. StartIPMI runs a real OpenIPMI ipmi_sim on a free UDP port of
// 127.0.0.1 whose chassis power lives in a file kept by a chassis_control script, so a
// test checks the BMC's own state and power log rather than what a fence agent reports.
// IgnorePowerOff makes a BMC that acknowledges power-off and does nothing, to prove
// that agents verify instead of trusting the acknowledgement.
package bmc
