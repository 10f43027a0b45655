package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/configfile"
	"github.com/kubefence/kubefence/pkg/controller"
	"github.com/kubefence/kubefence/pkg/fencecall"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/kubemetrics"
	"github.com/kubefence/kubefence/pkg/leader"
	"github.com/kubefence/kubefence/pkg/maintenance"
	"github.com/kubefence/kubefence/pkg/oncall"
	"github.com/kubefence/kubefence/pkg/plugin"
	"github.com/kubefence/kubefence/pkg/testpoint"
)

// ExitDeposed is the exit code of a replica that lost its Lease or met a newer epoch.
const ExitDeposed = 2

// AppOptions are the fence-controller command's flags.
type AppOptions struct {
	ConfigPath string
	Kubeconfig string
	// Serving says where and how health probes and metrics are served.
	Serving ServingOptions
	// Identity is this replica's identity Lease: who runs where.
	Identity IdentityOptions
	// LeaderPod, when set, is this replica's own pod: it gets the leader.LeaderCondition.
	LeaderPod *leader.PodRef
	// Pod is this replica's own pod, from the downward API.
	Pod PodOptions
	// Workers is how many nodes are synced at once; zero means DefaultWorkers.
	Workers int
	// PauseConfigMap names the ConfigMap of pause requests in the controller's namespace.
	PauseConfigMap string
	// TargetInterval is how often the leader reads every fence device.
	TargetInterval time.Duration
	// RateLimit bounds the client's requests to the API server.
	RateLimit RateLimitOptions
	// Heartbeats are this replica's own heartbeat addresses.
	Heartbeats HeartbeatAddresses
	// Start bounds the start (the caches' sync) and says where a failed one is reported.
	Start StartOptions
	// AnswerSocket is the unix socket where the running replica answers explain and
	// devices, and where `fence-controller explain` and `devices` ask it (answers.go);
	// empty: none.
	AnswerSocket string
}

// PodOptions name this replica's own pod (POD_NAMESPACE, POD_NAME, POD_UID from the
// downward API).
type PodOptions struct {
	Namespace, Name string
	// UID is the pod's UID: with Name, the pod then owns the replica's identity Lease,
	// and the garbage collector removes the Lease with the pod (an uninstall leaves none
	// behind).
	UID string
}

// IdentityOptions say what this replica's identity Lease says and how long it lives.
type IdentityOptions struct {
	// NodeName is the node this replica runs on; see controller.LeaderOptions.NodeName.
	NodeName string
	// LeaseDuration is how long a replica's identity Lease lives unrenewed before the
	// leader collects it; RenewInterval how often each replica renews its own.
	LeaseDuration time.Duration
	RenewInterval time.Duration
}

// RateLimitOptions bound the client's requests to the API server; zero means
// DefaultQPS and DefaultBurst.
type RateLimitOptions struct {
	QPS   float32
	Burst int
}

// HeartbeatAddresses, when set, replace heartbeats.bindAddress and
// heartbeats.advertiseAddress: each replica's own, where the configuration is shared.
type HeartbeatAddresses struct {
	BindAddress, AdvertiseAddress string
}

// The client's default request budget. client-go's own (5 per second) would queue the
// ten requests of an incident behind each other, and those of a hundred simultaneous
// incidents for seconds. Fencing is latency-critical and rare; the disruption budget
// (maxConcurrent, storm hold) bounds the burst, and API Priority and Fairness protects the
// API server. A hundred incidents at once take about 1,000 requests, within the burst; at
// a thousand, four times this QPS with ten times the workers cut the p99 by a third, and
// ten times the workers alone by a tenth (BenchmarkIncidentCost, docs/benchmarks.md).
const (
	DefaultQPS   = 500
	DefaultBurst = 1000
)

// LoadConfig reads and validates the configuration file.
func LoadConfig(path string) (*v1alpha1.Config, error) {
	cfg, _, err := loadConfig(path)
	return cfg, err
}

func loadConfig(path string) (*v1alpha1.Config, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read config: %w", err)
	}
	cfg, warnings, err := configfile.Decode(data)
	if err != nil {
		return cfg, warnings, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, warnings, nil
}

// RunApp runs the controller process until ctx ends. deposed is called (and must not
// return) when this replica loses its Lease.
func RunApp(ctx context.Context, o AppOptions, deposed func(error)) error {
	// client-go's workqueue, REST client and leader election metrics: its providers are
	// read when a queue or an elector is made, so before any is.
	kubemetrics.Install()
	cfg, warnings, err := loadConfig(o.ConfigPath)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		klog.FromContext(ctx).Info("Configuration warning", "warning", w)
	}
	if err := o.heartbeatAddresses(cfg); err != nil {
		return err
	}
	cs, err := clients(o)
	if err != nil {
		return err
	}
	client := cs.kube
	host, err := newAgentHost(cfg)
	if err != nil {
		return err
	}
	defer host.Close()
	agents := newAgentSource(cfg, host, cs.dynamic)
	if err := checkAgents(ctx, cfg, agents); err != nil {
		return err
	}

	identity := leader.NewIdentity()
	var guard *leader.LeaseGuard
	var reach *leader.Reach
	if *cfg.LeaderElection.Enabled {
		guard = &leader.LeaseGuard{Client: client, Config: cfg.LeaderElection, Identity: identity}
		reach = &leader.Reach{MaxGap: leader.ReachGap(cfg.LeaderElection)}
	}
	recorder, stopEvents := leader.NewEventRecorder(ctx, client, guard, identity)
	defer stopEvents()
	registry := newRegistry()
	ctrls, err := Assemble(Assembly{Config: cfg, Kube: cs.kube, Fencing: cs.fencing, Dynamic: cs.dynamic, Agents: agents,
		Recorder: recorder, Registry: registry, Identity: identity, TargetInterval: o.TargetInterval, PauseConfigMap: o.PauseConfigMap,
		Lease: guard, OnDeposed: deposed, Leader: controller.LeaderOptions{Reach: reach, NodeName: o.Identity.NodeName, IdentityRenewInterval: o.Identity.RenewInterval},
		Tuning: controller.Tuning{Workers: o.Workers, PauseAt: pauseAt(ctx)}})
	if err != nil {
		return err
	}
	if err := kubemetrics.Register(registry); err != nil {
		return fmt.Errorf("client-go metrics: %w", err)
	}
	health := &Health{ReadyOnlyWhenLeader: o.Serving.ReadyOnlyWhenLeader}
	// One slot for each sender: the health server, the metrics server, the answer socket
	// and the election.
	errc := make(chan error, 4)
	if err := serve(ctx, o.Serving, client, health, registry, errc); err != nil {
		return err
	}
	if o.AnswerSocket != "" {
		a := answers{explainer: oncall.Explainer{Config: cfg, Kube: client, Now: time.Now, Live: ctrls.Loop.Sources},
			devices: ctrls.Monitor, leading: health.leader.Load, identity: identity}
		if err := serveAnswers(ctx, o.AnswerSocket, a, errc); err != nil {
			return err
		}
	}
	if err := startCaches(ctx, o, client, identity, ctrls.Caches); err != nil {
		return err
	}
	if err := ctrls.Agents.Start(ctx); err != nil {
		return err
	}
	health.SetSynced()
	go ctrls.Planned.Run(ctx, maintenance.RediscoverEvery)
	klog.FromContext(ctx).Info("Caches synced", "identity", identity)

	ids := announce(ctx, o, client, cfg.LeaderElection.Namespace, identity, registry)
	lead := leading(o, client, health, ids, host, ctrls)
	elected := campaign(ctx, client, cfg.LeaderElection, identity, reach, lead, deposed, errc)
	return awaitEnd(ctx, cfg.LeaderElection, elected, errc)
}

// pauseAt is the test pause point testpoint.Env names. A binary built without
// testpoint.BuildTag (a release) ignores it, and says so: a test that set it would
// otherwise wait for a pause that never comes.
func pauseAt(ctx context.Context) string {
	point := os.Getenv(testpoint.Env)
	if point != "" && !testpoint.Enabled {
		klog.FromContext(ctx).Info("Test pause point ignored: this binary was built without its build tag",
			"env", testpoint.Env, "point", point, "tag", testpoint.BuildTag)
		return ""
	}
	return point
}

// apiClients are the controller's API clients, sharing one request budget.
type apiClients struct {
	fencing versioned.Interface
	kube    kubernetes.Interface
	// dynamic reads Cluster API Machines for MachineHealthCheck's requests.
	dynamic dynamic.Interface
}

// clients returns the controller's API clients, with o's request budget.
func clients(o AppOptions) (apiClients, error) {
	rc, err := restConfig(o.Kubeconfig)
	if err != nil {
		return apiClients{}, err
	}
	rc.QPS, rc.Burst = o.RateLimit.QPS, o.RateLimit.Burst
	if rc.QPS <= 0 {
		rc.QPS = DefaultQPS
	}
	if rc.Burst <= 0 {
		rc.Burst = DefaultBurst
	}
	// No API request may hang the incident it serves: after an API server restart a
	// request on a half-open connection would otherwise wait for TCP to give up.
	rc.Timeout = 30 * time.Second
	// One budget for both clients, as --kube-api-qps says: each would otherwise get a
	// rate limiter of its own, and the controller twice the requests it was given.
	rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst)
	var cs apiClients
	if cs.fencing, err = versioned.NewForConfig(rc); err != nil {
		return cs, fmt.Errorf("NodeFence client: %w", err)
	}
	if cs.kube, err = kubernetes.NewForConfig(Protobuf(rc)); err != nil {
		return cs, fmt.Errorf("kubernetes client: %w", err)
	}
	if cs.dynamic, err = dynamic.NewForConfig(rc); err != nil {
		return cs, fmt.Errorf("dynamic client: %w", err)
	}
	return cs, nil
}

// checkAgents has every agent validate its parameters: an agent that refuses them cannot
// fence, and is refused now, not at the first incident. A remote agent that is down may
// come up later.
func checkAgents(ctx context.Context, cfg *v1alpha1.Config, agents fencecall.Source) error {
	problems := checkConfiguredAgents(ctx, cfg, agents)
	for _, u := range problems.Unreachable {
		klog.FromContext(ctx).Info("Agent did not answer at start; its parameters are checked at its first call", "error", u)
	}
	if len(problems.Invalid) > 0 {
		return fmt.Errorf("config: %w", problems.Invalid.ToAggregate())
	}
	return nil
}

func newAgentHost(cfg *v1alpha1.Config) (*plugin.Host, error) {
	host, err := plugin.NewHost(plugin.HostConfig{Dir: cfg.PluginDir, Agents: agentSpecs(cfg), Logger: pluginLogger()})
	if err != nil {
		return nil, fmt.Errorf("agent host: %w", err)
	}
	return host, nil
}

// Protobuf returns a copy of rc that speaks protobuf, as Kubernetes' own controllers do:
// it costs the API server less than JSON to encode and decode. Only for the built-in
// types; custom resources (NodeFences) are JSON only.
func Protobuf(rc *rest.Config) *rest.Config {
	pc := rest.CopyConfig(rc)
	pc.ContentType = runtime.ContentTypeProtobuf
	pc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return pc
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		// In a pod, as the chart runs every subcommand: the same config clientcmd falls
		// back to, without its warning in every log (the uninstall check's is read by
		// people).
		if rc, err := rest.InClusterConfig(); err == nil {
			return rc, nil
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return rc, nil
}

// RunCheck reads every node's first-level fence device once, as the leader's monitor
// does, and prints a table to w: the first command to run after an install, as
// Pacemaker users run stonith_admin --list. It needs no leader election. It reports
// whether every device answered.
func RunCheck(ctx context.Context, o AppOptions, w io.Writer) (bool, error) {
	cfg, err := LoadConfig(o.ConfigPath)
	if err != nil {
		return false, err
	}
	rc, err := restConfig(o.Kubeconfig)
	if err != nil {
		return false, err
	}
	client, err := kubernetes.NewForConfig(Protobuf(rc))
	if err != nil {
		return false, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return false, fmt.Errorf("dynamic client: %w", err)
	}
	host, err := newAgentHost(cfg)
	if err != nil {
		return false, err
	}
	defer host.Close()
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, fmt.Errorf("list nodes: %w", err)
	}
	nodes := make([]*corev1.Node, len(list.Items))
	for i := range list.Items {
		nodes[i] = &list.Items[i]
	}
	checks, err := fencecall.CheckTargets(ctx, cfg, newAgentSource(cfg, host, dyn), client, nodes)
	if err != nil {
		return false, err
	}
	if err := fencecall.PrintTargetChecks(w, checks); err != nil {
		return false, fmt.Errorf("print target checks: %w", err)
	}
	for _, tc := range checks {
		if !tc.Up() {
			return false, nil
		}
	}
	return true, nil
}

// heartbeatAddresses puts the --heartbeat-* addresses into cfg, checked as the
// configuration's own are.
func (o AppOptions) heartbeatAddresses(cfg *v1alpha1.Config) error {
	if o.Heartbeats.BindAddress == "" && o.Heartbeats.AdvertiseAddress == "" {
		return nil
	}
	if cfg.Heartbeats == nil {
		return fmt.Errorf("--heartbeat-bind-address, --heartbeat-advertise-address: heartbeats are off (the configuration has no heartbeats section)")
	}
	h := *cfg.Heartbeats
	if o.Heartbeats.BindAddress != "" {
		h.BindAddress = o.Heartbeats.BindAddress
	}
	if o.Heartbeats.AdvertiseAddress != "" {
		h.AdvertiseAddress = o.Heartbeats.AdvertiseAddress
	}
	check := *cfg
	check.Heartbeats = &h
	if errs := check.Validate(); len(errs) > 0 {
		return fmt.Errorf("--heartbeat-bind-address, --heartbeat-advertise-address: %w", errs.ToAggregate())
	}
	cfg.Heartbeats = &h
	return nil
}
