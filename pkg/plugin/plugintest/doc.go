// Package plugintest is the conformance kit for kubefence fence agents. An
// agent's own tests call Run with a Kit that says how to make a target and how
// to read the target's real state from the peer (a BMC's power file, a cloud
// API, a storage target), so the kit can check what the agent claims against
// what happened: Describe is sane, Validate rejects bad params by name, Fence
// off is verified and idempotent, Status after off is off, Unfence works where
// supported, an expired deadline is honoured, and secrets never show up in
// errors, evidence or logs.
//
// It is a published testing kit, so unlike other non-test packages it imports
// the testing package.
package plugintest
