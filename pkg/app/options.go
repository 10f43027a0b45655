package app

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/kubefence/kubefence/pkg/controller"
	"github.com/kubefence/kubefence/pkg/devicemonitor"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/oncall"
)

// AddFlags registers the controller's flags on fs, with their defaults, as Kubernetes
// components' options do. What the flags leave for main (version, validation, the leader
// pod condition) is returned in Flags.
func (o *AppOptions) AddFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.BoolVar(&f.Validate, "validate-config", false, "check the --config file and exit")
	fs.BoolVar(&f.ValidateOptions.Agents, "validate-agents", true, "with --validate-config, also ask each agent to check its parameters (needs pluginDir's binaries, and remote agents to answer)")
	fs.BoolVar(&f.ValidateOptions.RequireFiles, "require-files", false, "with --validate-config, a remote agent's certificate file that is not on this machine is an error, as for the controller; without it the agent is not checked (a warning), for a file checked away from the controller's pod")
	fs.BoolVar(&f.Version, "version", false, "print the version and exit")
	fs.BoolVar(&f.LeaderCondition, "leader-pod-condition", false, "set the "+string(leader.LeaderCondition)+
		" condition on this replica's pod (POD_NAMESPACE, POD_NAME from the downward API); use it as a readiness gate")
	fs.StringVar(&o.ConfigPath, "config", "/etc/kubefence/config.yaml", "configuration file")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty means in-cluster")
	fs.StringVar(&o.AnswerSocket, "answer-socket", "", "a unix socket where this replica, while it leads, answers `fence-controller explain` and `fence-controller devices` (run in its container with the same flag) from the loop's own view and its devices' last reads; empty: none")
	fs.StringVar(&o.PauseConfigMap, "pause-configmap", oncall.DefaultPauseConfigMap, "the ConfigMap of pause requests in the controller's namespace (leaderElection.namespace): each data entry pauses fencing while it stands")
	fs.StringVar(&o.Serving.HealthAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz, plain HTTP without authentication (the kubelet's probes)")
	fs.StringVar(&o.Serving.MetricsAddress, "metrics-bind-address", ":8443", "address of /metrics; \""+MetricsOff+"\" serves no metrics")
	fs.BoolVar(&o.Serving.MetricsSecure, "metrics-secure", true, "serve /metrics over HTTPS, only to bearer tokens the API server authenticates (TokenReview) whose identity may get /metrics (SubjectAccessReview); false serves plain HTTP to anyone, for a trusted network")
	fs.StringVar(&o.Serving.TLSCertFile, "tls-cert-file", "", "the metrics server's certificate (PEM), with --tls-private-key-file, read again when it changes; when both are empty a self-signed one is made at start")
	fs.StringVar(&o.Serving.TLSKeyFile, "tls-private-key-file", "", "the private key (PEM) of --tls-cert-file")
	fs.IntVar(&o.Workers, "workers", controller.DefaultWorkers, "how many nodes are synced at once (each open incident holds one while it is driven)")
	fs.StringVar(&o.Pod.Namespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "this replica's pod's namespace (default $POD_NAMESPACE); the pod owns the identity Lease only when it is the Lease's namespace")
	fs.StringVar(&o.Pod.Name, "pod-name", os.Getenv("POD_NAME"), "this replica's pod (default $POD_NAME, from the downward API); with --pod-uid it owns the replica's identity Lease")
	fs.StringVar(&o.Pod.UID, "pod-uid", os.Getenv("POD_UID"), "the UID of this replica's pod (default $POD_UID, from the downward API's metadata.uid)")
	fs.StringVar(&o.Identity.NodeName, "node-name", os.Getenv("NODE_NAME"), "the node this replica runs on (default $NODE_NAME, from the downward API's spec.nodeName); it is never fenced, nor is any node whose replica renews its identity Lease")
	fs.BoolVar(&o.Serving.ReadyOnlyWhenLeader, "ready-only-when-leader", false, "report ready only while leader")
	fs.DurationVar(&o.Identity.LeaseDuration, "identity-lease-duration", time.Hour, "how long an unrenewed replica identity Lease lives before the leader collects it")
	fs.DurationVar(&o.Identity.RenewInterval, "identity-renew-interval", 5*time.Second, "how often each replica renews its identity Lease")
	fs.DurationVar(&o.TargetInterval, "target-check-interval", devicemonitor.DefaultInterval, "how often the leader reads every node's first-level fence device (kubefence_target_up)")
	fs.Func("kube-api-qps", "requests per second to the API server, sustained (default 500)", func(s string) error {
		return parseQPS(s, &o.RateLimit.QPS)
	})
	fs.IntVar(&o.RateLimit.Burst, "kube-api-burst", DefaultBurst, "requests to the API server in a burst")
	fs.StringVar(&o.Heartbeats.BindAddress, "heartbeat-bind-address", "", "host:port where this replica answers the node agents; replaces heartbeats.bindAddress")
	fs.StringVar(&o.Heartbeats.AdvertiseAddress, "heartbeat-advertise-address", "", "host:port the node agents dial for this replica; replaces heartbeats.advertiseAddress")
	fs.DurationVar(&o.Start.CacheSyncTimeout, "cache-sync-timeout", DefaultCacheSyncTimeout, "how long the informer caches have to sync at start; a replica whose caches did not (RBAC forbids a list, a CustomResourceDefinition is missing) exits with the reason in its log, an Event on its pod and its termination message; 0 waits without bound")
	fs.StringVar(&o.Start.TerminationMessagePath, "termination-message-path", DefaultTerminationMessagePath, "where a failed start writes its reason for kubectl describe pod (the container's terminationMessagePath); written only if the file exists")
	return f
}

// Flags are the command-line switches that main acts on itself.
type Flags struct {
	// Validate is --validate-config; ValidateOptions how far it checks.
	Validate                 bool
	ValidateOptions          ValidateOptions
	Version, LeaderCondition bool
}

func parseQPS(s string, qps *float32) error {
	v, err := strconv.ParseFloat(s, 32)
	if err != nil || v <= 0 {
		return fmt.Errorf("want a number of requests per second above 0, got %q", s)
	}
	*qps = float32(v)
	return nil
}
