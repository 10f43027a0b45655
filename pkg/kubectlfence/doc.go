// Package kubectlfence is the kubectl plugin `kubectl fence` (cmd/kubectl-fence): what a
// person on call reads and says to one kubefence release through the API server, with the
// kubeconfig's identity and nothing else. It finds the release in a namespace (its
// controller Deployment, its leader Lease), reads the leader, the pause requests and the
// incidents, writes a person's words (pause entries, confirm-off, cancel, a fence
// request) in the caller's own name as its SelfSubjectReview says it, and has the running
// leader answer `explain`, `check` and status's devices (their last reads) by exec in its
// controller container, when a SelfSubjectAccessReview says the caller may. It decides
// nothing itself: the leader reads every word and answers it.
package kubectlfence
