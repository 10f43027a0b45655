// Package leader is who acts: leader election on the configured Lease with the fencing
// epoch (Elect), the check before every irreversible action that this replica still
// leads at its epoch (LeaseGuard), the one Guard the process shares among its
// controllers (the epoch it leads at, that check, the confirmation within the renew
// deadline before any other write, the stop of a deposed replica), every replica's
// identity Lease (IdentityLeases, owned by the replica's pod), and the leader pod
// condition (SetLeaderCondition). It knows nothing of fencing: pkg/controller decides
// what the leader does.
package leader
