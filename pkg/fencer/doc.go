// Package fencer is the state machine of one incident. It does no I/O, and the incident's
// persisted status is its whole state, so a new leader resumes an incident from whatever
// phase was last written.
//
// Lifecycle (lifecycle.go) is the whole life, phase by phase: given the status and what
// the controller observed (Facts), it says what to do next (an Action: ask policy, read
// the Lease live, cancel, hold, start fencing, fence, release, release late, raise a
// contradiction, recover, or nothing). Its doc lists every state and every way out.
//
// Within the Fencing phase, Next reads the status and says what to do (call an agent's
// Fence, read its state back, wait, or stop), and Apply records what happened.
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
