// Package fencer is the state machine of one fencing incident. It does no I/O: Next reads
// the incident's persisted status and says what to do (call an agent's Fence, read its
// state back, wait, or stop), and Apply records what happened. Because the status is the
// whole state, a new leader resumes an incident from whatever phase was last written.
//
// Levels are tried in order, Pacemaker style. A level is done only when its agents read
// back a fenced state (all of them in mode all, one in mode any); a call that fails or an
// attempt that is not verified before its deadline is a failure, retried with backoff and
// then escalated to the next level.
//
// CanMove (phase.go) holds every phase an incident can be in and every way out of it.
// Next and Apply never set the phase; the controller moves it, through CanMove, in one
// place (pkg/controller, enter).
package fencer
