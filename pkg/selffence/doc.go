// Package selffence is the contract by which a node fences itself through its watchdog,
// and by which the controller may count it fenced: the node agent's rule for when to
// stop feeding (Live) and the controller's rule for when a node that stopped must have
// reset (Verify). Both are pure: they take what each side knows and a time, and do no
// I/O. The argument that the two rules together never let the controller release a node
// that still runs is written down in docs/safety-model.md and checked by a model of
// partitions, API server outages, relays and slow clocks (TestSelfFenceModel).
package selffence
