// Package plugin owns the contract between the kubefence controller and its fence
// agents, and everything needed to run an agent as a separate process.
//
// It holds the Agent interface and its types (agent.go), the typed errors that
// cross the process boundary (errors.go, wire.go), the gRPC shims and the
// go-plugin handshake (grpc.go), the one call an agent binary makes (Main, which
// runs Serve under the controller or ServeRemote with mutual TLS, main.go), and
// the controller side that verifies, launches or dials, keeps warm and restarts
// agents (Host, host.go, handle.go, remote.go). plugintest is the conformance
// kit every agent's tests run. The wire schema lives in proto/agent.proto; the generated
// code in agentpb is regenerated with hack/proto.sh.
//
// Nothing here knows about Kubernetes: the package imports no k8s.io code and no
// other kubefence package, so agent binaries stay small and agent authors see
// only this package.
package plugin
