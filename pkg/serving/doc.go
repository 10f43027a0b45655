// Package serving owns how the controller's HTTP endpoints are served as Kubernetes
// components serve theirs: metrics over TLS behind delegated authentication (TokenReview)
// and authorization (SubjectAccessReview), with a self-signed certificate when none is
// given, and plain listeners for the kubelet's probes.
package serving
