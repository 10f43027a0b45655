package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The configuration file's own apiVersion and kind, as Kubernetes components version
// theirs (KubeletConfiguration, KubeSchedulerConfiguration).
const (
	ConfigGroup      = "config.kubefence.io"
	ConfigAPIVersion = ConfigGroup + "/v1alpha1"
	ConfigKind       = "FenceControllerConfiguration"
)

// Config is the controller's configuration file (--config). Its apiVersion is
// config.kubefence.io/v1alpha1 and its kind FenceControllerConfiguration; a file without
// them is read as this version, with a warning.
type Config struct {
	metav1.TypeMeta `json:",inline"`
	// Detection sets when a node counts as unhealthy.
	Detection Detection `json:"detection"`
	// LeaderElection configures the Lease that elects the acting replica.
	LeaderElection LeaderElection `json:"leaderElection"`
	// Agents are the fence agents the controller may call, by name; at most 100.
	Agents []Agent `json:"agents"`
	// Policies decide, per node, whether and how to fence. The first policy whose
	// nodeSelector matches a node applies; a policy without a selector matches every node.
	// At most 100.
	Policies []Policy `json:"policies"`
	// PluginDir is the directory that holds the agent binaries.
	PluginDir string `json:"pluginDir,omitempty"`
	// Paused stops every policy from starting a fence: decisions are still made and
	// reported as held. Incidents already fencing carry on, since stopping a fence half way
	// leaves a node neither on nor verifiably off.
	Paused bool `json:"paused,omitempty"`
	// DryRun runs every policy in shadow mode: decisions are made and reported as
	// WouldFence, and nothing is fenced or released.
	DryRun bool `json:"dryRun,omitempty"`
	// History says how long the incidents the controller opened are kept once they ended.
	History History `json:"history,omitempty"`
	// Watchdog says how the controller counts on the node agents' watchdogs, for levels
	// with watchdog: true (docs/safety-model.md, section 9).
	Watchdog WatchdogConfig `json:"watchdog,omitempty"`
	// Heartbeats seats each replica among the node agents' peers, so that a node whose
	// agent they declare gone, whose kubelet does not answer and whose Lease has been
	// silent for one and a half renewal periods is unhealthy without waiting for the
	// Lease threshold (docs/safety-model.md, section 10). Off when left out.
	Heartbeats *Heartbeats `json:"heartbeats,omitempty"`
	// ExternalRemediation lets NodeHealthCheck (medik8s) and Cluster API's
	// MachineHealthCheck choose kubefence as their remediator: each KubefenceRemediation
	// they create opens a NodeFence, under the node's policy, and mirrors it
	// (docs/health-checks.md). Needs the KubefenceRemediation CRDs.
	ExternalRemediation ExternalRemediation `json:"externalRemediation,omitempty"`
}

// ExternalRemediation is the external remediation contract's switch.
type ExternalRemediation struct {
	// Enabled watches KubefenceRemediations in every namespace. Off when left out.
	Enabled bool `json:"enabled,omitempty"`
}

// Heartbeats is the controller's seat among the node agents' peers.
type Heartbeats struct {
	// KeyFile holds the agents' peer key (their --peer-key-file, from the same Secret).
	// Required.
	KeyFile string `json:"keyFile"`
	// BindAddress is host:port where the replica answers the agents, UDP and TCP; default
	// 0.0.0.0:7947.
	BindAddress string `json:"bindAddress,omitempty"`
	// AdvertiseAddress is host:port the agents dial; default: the bind address, or with an
	// unspecified host, the pod's IP from the POD_IP environment variable.
	AdvertiseAddress string `json:"advertiseAddress,omitempty"`
	// ProbeInterval is how often the replica probes one agent, in turn, as the agents'
	// --peer-probe-interval. From 100ms to 10s; default 500ms.
	ProbeInterval metav1.Duration `json:"probeInterval,omitempty"`
	// KubeletTimeout bounds each probe of a kubelet: an HTTPS request to its
	// status.daemonEndpoints port on each InternalIP, where any HTTP answer shows it
	// alive. From 100ms to 10s; default 1s.
	KubeletTimeout metav1.Duration `json:"kubeletTimeout,omitempty"`
	// KubeletCheckInterval is how often the replica probes every node's kubelet, whatever
	// its agent does: a kubelet's silence counts as a sign of death only once this replica
	// has had an answer from it, and only until a check goes unanswered while the node's
	// agent is among its peers (a firewalled port, a NetworkPolicy); an unanswered check is
	// asked again 30 probeIntervals later (at least 2s), and only that second probe's result
	// counts. The probes are spread over the interval. From 1s to 1h; default 1m.
	KubeletCheckInterval metav1.Duration `json:"kubeletCheckInterval,omitempty"`
	// LeaveGrace is how long an agent that left its peers with a goodbye (as every agent
	// that is stopped does, in a DaemonSet rollout) is not counted gone: its replacement
	// is on its way. An agent declared dead by its peers is gone at once. From 1s to 1h;
	// default 2m.
	LeaveGrace metav1.Duration `json:"leaveGrace,omitempty"`
}

// WatchdogConfig is what the controller needs to know of the node agents (fence-node-agent)
// to count a node fenced through its own watchdog.
type WatchdogConfig struct {
	// Isolation is the longest --isolation of the node agents: a node cut off from the
	// API server and its peers for that long stops feeding its watchdog. A report of a
	// longer one makes its node ineligible. From 1s to 10m; default 10s.
	Isolation metav1.Duration `json:"isolation,omitempty"`
	// ReportMaxAge is how old the last report of an armed watchdog may be when an
	// incident starts fencing; at least twice the agents' --report-interval. From 1s to
	// 1h; default 2m. Whatever it says, a node whose kubelet was seen alive more than two
	// of its agent's report intervals after the agent's latest report, or whose agent
	// left its peers after it, is not eligible: the agent went quiet while its node lived.
	ReportMaxAge metav1.Duration `json:"reportMaxAge,omitempty"`
	// Namespace holds the agents' report Leases; default: leaderElection.namespace, the
	// release namespace in the chart.
	Namespace string `json:"namespace,omitempty"`
	// AllowEmulated counts emulated watchdogs (an agent's --watchdog unix:PATH), which
	// reset no machine, only a test's simulated one: for test clusters only. Off, a node
	// whose agent reports an emulated watchdog is not eligible for a watchdog level.
	AllowEmulated bool `json:"allowEmulated,omitempty"`
}

// History is the retention of ended incidents, as a Job's TTL: the leader deletes an
// ended NodeFence that the controller opened once it is older than MaxAge or beyond the
// newest KeepPerNode of its node. The newest ended incident of each node always stays (a
// Failed one holds new automatic incidents back), open incidents are never touched, and
// neither are NodeFences that a person created.
type History struct {
	// MaxAge is how long an ended incident is kept. From 1h to 8760h; default 720h (30 days).
	MaxAge metav1.Duration `json:"maxAge,omitempty"`
	// KeepPerNode is how many ended incidents are kept per node. From 1 to 1000; default 10.
	KeepPerNode int32 `json:"keepPerNode,omitempty"`
}

// Detection sets the evidence that makes a node unhealthy.
type Detection struct {
	// LeaseStaleAfter: a node whose kube-node-lease Lease was not renewed for this long is
	// unhealthy. Kubelets renew every 10s, so the default of 30s is three missed renewals.
	// From 1s to 1h.
	LeaseStaleAfter metav1.Duration `json:"leaseStaleAfter,omitempty"`
	// NotReadyAfter: a node whose Ready condition has been False or Unknown for this long is
	// unhealthy, once its Lease (if it has one) has also been silent for the evidence
	// floor: a kubelet that renews on its own cadence is alive, whatever Ready says.
	// From 1s to 1h.
	NotReadyAfter metav1.Duration `json:"notReadyAfter,omitempty"`
	// ExpectedRenewInterval is how often your kubelets renew their node Lease (10s unless
	// their nodeLeaseDurationSeconds was changed); leave it out when unknown. No node is
	// ever judged dead on a Lease silence shorter than its evidence floor: three of its
	// own renewal periods as this replica measured them, or, before it has measured any
	// (right after it starts or takes over), the Lease's leaseDurationSeconds, or three
	// ExpectedRenewIntervals if that is longer. Neither LeaseStaleAfter, nor minWait, nor
	// a workload rule goes below that floor. From 100ms to 1h, or 0s (unknown).
	ExpectedRenewInterval metav1.Duration `json:"expectedRenewInterval,omitempty"`
	// FlapWindow and FlapThreshold damp flapping: a node whose health went bad and came
	// back FlapThreshold times within FlapWindow is reported Flapping, not Unhealthy, until
	// the oldest of those recoveries leaves the window. A node that breaks and mends itself
	// that often is better looked at by a person than power cycled again and again.
	// Defaults: 10m and 3. FlapWindow from 1s to 24h, FlapThreshold from 2 to 100.
	FlapWindow    metav1.Duration `json:"flapWindow,omitempty"`
	FlapThreshold int32           `json:"flapThreshold,omitempty"`
}

// LeaderElection configures the controller's Lease.
type LeaderElection struct {
	// Enabled turns leader election on (default). Only a single replica may run without it.
	Enabled *bool `json:"enabled,omitempty"`
	// Namespace and Name of the Lease.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// LeaseDuration, RenewDeadline and RetryPeriod as in client-go's leaderelection, each
	// from 100ms to 10m, with RetryPeriod < RenewDeadline < LeaseDuration.
	LeaseDuration metav1.Duration `json:"leaseDuration,omitempty"`
	RenewDeadline metav1.Duration `json:"renewDeadline,omitempty"`
	RetryPeriod   metav1.Duration `json:"retryPeriod,omitempty"`
}

// Agent is a fence agent plugin and how a node maps to its target.
type Agent struct {
	// Name identifies the agent in policies. It is also the binary's file name in
	// PluginDir unless Binary is set.
	Name string `json:"name"`
	// Binary is the agent's file name inside PluginDir.
	Binary string `json:"binary,omitempty"`
	// SHA256 is the hex SHA-256 of the binary; the controller refuses any other binary.
	// Required for a local agent; not used with Address.
	SHA256 string `json:"sha256,omitempty"`
	// Address is host:port of a remote agent (an agent binary run with "serve" in the
	// network that reaches its BMCs or storage); the controller dials it with mutual TLS
	// instead of launching a binary. Exactly one of Address and SHA256 is set.
	Address string `json:"address,omitempty"`
	// TLS holds the certificate files for a remote agent; required with Address.
	TLS *AgentTLS `json:"tls,omitempty"`
	// Params are default parameters passed on every call (non-secret): at most 64, of at
	// most 64 KiB in all (names and values). The agent checks each when the configuration
	// is loaded; a problem is reported at its path, e.g. agents[0].params.cipherSuite.
	Params map[string]string `json:"params,omitempty"`
	// SecretRef names the Secret whose keys are passed as the agent's secret parameters:
	// one for every node (name), or one per node (template or annotation), for fleets
	// that give every BMC its own password. It is read at each call, so a rotated Secret
	// is used from the next call on. Required for an agent that says its secrets are
	// required (the BMC agent, IPMI and Redfish alike: username and password): without
	// it every fence would fail, so the configuration is refused when it is loaded.
	SecretRef *SecretRef `json:"secretRef,omitempty"`
	// Target says how to find the agent's target for a node.
	Target TargetSource `json:"target"`
	// Timeout bounds each call to this agent. From 100ms to 1h; default 30s.
	Timeout metav1.Duration `json:"timeout,omitempty"`
	// NetworkFence makes this agent a csi-addons NetworkFence that the controller itself
	// creates and reads back, instead of a plugin (docs/networkfence.md): the node's
	// addresses are cut off from the storage a CSI driver serves (Ceph RBD and CephFS,
	// IBM block storage). With it, binary, sha256, address, tls, params and secretRef
	// are not set, and target is optional.
	NetworkFence *NetworkFence `json:"networkFence,omitempty"`
	// OnTimeout bounds each Unfence call (power on, storage access restored), as
	// Pacemaker's pcmk_on_timeout does: a server can take longer to power on than off.
	// Default: Timeout. An Unfence that fails or times out is read back with Status
	// before anything else happens, so its outcome is recorded, never assumed. From 100ms
	// to 1h.
	OnTimeout metav1.Duration `json:"onTimeout,omitempty"`
	// OffDelay is the longest this agent's device takes to act on an off it acknowledged
	// (its stated delay): an off whose outcome is unknown (the call timed out or its agent
	// died, it was found in flight after a restart or handover, or it was acknowledged and
	// not yet read off) is read back at least this long before this agent sends another.
	// From 0 to 10m; default 5s.
	OffDelay metav1.Duration `json:"offDelay,omitempty"`
}

// NetworkFence is a csi-addons NetworkFence (csiaddons.openshift.io/v1alpha1) as a
// fencing method. Fence creates one for the node, Fenced, with the node's CIDRs, and it
// holds once csi-addons reports result Succeeded; unfence, only after the node's new
// boot, sets it Unfenced, waits for csi-addons to report that done, then deletes it
// (deleting alone does not unfence). There is one object per agent, incident and set of
// CIDRs, named kubefence-<incident>-<hash> and labelled as kubefence's: one Rook or a
// person made is never touched.
type NetworkFence struct {
	// Driver is the CSI driver that fences (the NetworkFence's spec.driver), e.g.
	// rbd.csi.ceph.com. Exactly one of driver and className is set.
	Driver string `json:"driver,omitempty"`
	// ClassName is a NetworkFenceClass (spec.networkFenceClassName), for csi-addons
	// releases whose NetworkFence has that field; the class names the driver, its
	// parameters and its Secret.
	ClassName string `json:"className,omitempty"`
	// Parameters are the driver's parameters (spec.parameters), e.g. clusterID for
	// Ceph: at most 64, of at most 64 KiB in all. Only with driver.
	Parameters map[string]string `json:"parameters,omitempty"`
	// Secret names the Secret the csi-addons controller hands the driver (spec.secret),
	// e.g. Ceph's provisioner Secret. kubefence never reads it. Only with driver.
	Secret *SecretRef `json:"secret,omitempty"`
	// AddressTypes are the types of the node's status.addresses that are fenced, each
	// address as a CIDR of one address (/32, /128): InternalIP, ExternalIP. Default
	// [InternalIP]. A target mapping (an annotation, say, for a storage network's
	// address) replaces them: its value is a comma-separated list of CIDRs or addresses.
	AddressTypes []string `json:"addressTypes,omitempty"`
}

// AgentTLS are the PEM files the controller uses to reach a remote agent.
type AgentTLS struct {
	// CertFile and KeyFile are the controller's client certificate and key.
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	// CAFile is the CA bundle the agent's server certificate must verify against.
	CAFile string `json:"caFile"`
	// ServerName is the name the agent's certificate must carry; empty means the host
	// part of Address.
	ServerName string `json:"serverName,omitempty"`
}

// TargetSource finds an agent's target on the Node object. Exactly one field is set.
type TargetSource struct {
	// Annotation: the target is the value of this node annotation.
	Annotation string `json:"annotation,omitempty"`
	// Label: the target is the value of this node label.
	Label string `json:"label,omitempty"`
	// ProviderID: the target is the node's spec.providerID.
	ProviderID bool `json:"providerID,omitempty"`
	// Template: the target is this Go text/template executed on the node, for a naming
	// scheme that maps hundreds of nodes to their BMCs without an annotation on each. Its
	// data are .Name, .ProviderID, .Labels and .Annotations; a map key the node lacks
	// (.Labels.rack) is an error, not an empty string. Besides the built-in functions
	// (printf, index, ...) it has replace, trimPrefix, trimSuffix and lower, e.g.
	// `{{ .Name }}-ipmi.dc1.example.com` or `{{ .Name | trimSuffix ".example.com" }}-bmc`.
	// A result that is empty or holds white space is an error naming the node.
	Template string `json:"template,omitempty"`
}

// LevelMode says how many agents of a level must succeed.
type LevelMode string

const (
	ModeAll LevelMode = "all"
	ModeAny LevelMode = "any"
)

// RemediationStrategy says how a fenced node's workloads are released.
type RemediationStrategy string

const (
	// StrategyOutOfServiceTaint adds node.kubernetes.io/out-of-service and lets Kubernetes act.
	StrategyOutOfServiceTaint RemediationStrategy = "OutOfServiceTaint"
	// StrategyDirect makes the controller delete pods and VolumeAttachments itself.
	StrategyDirect RemediationStrategy = "Direct"
	// StrategyBoth does both; the default. The taint comes last, once the StatefulSets
	// have recreated the pods deleted (up to 2s): kube-controller-manager's taint eviction
	// deletes by name, and from a lagging cache it could meet a replacement.
	StrategyBoth RemediationStrategy = "Both"
)

// Policy decides how nodes it selects are fenced.
type Policy struct {
	Name string `json:"name"`
	// NodeSelector selects the nodes this policy governs; empty selects all.
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Action is Off (default) or Reboot. Both power the node off, verify it off and release
	// its workloads; Reboot then powers it on again, and it rejoins on a new boot. Off keeps
	// a node that stopped on its own out until a person has looked (planned reboots are
	// held, not fenced: see Maintenance); Reboot suits nodes whose failures are mostly
	// software, where capacity matters more.
	Action FenceAction `json:"action,omitempty"`
	// Levels are tried in order until one is verified; at most 10.
	Levels []Level `json:"levels"`
	// Remediation is how workloads are released after a verified fence.
	Remediation RemediationStrategy `json:"remediation,omitempty"`
	// Budget limits how much fencing may happen at once.
	Budget Budget `json:"budget,omitempty"`
	// Paused stops this policy from starting a fence; see Config.Paused.
	Paused bool `json:"paused,omitempty"`
	// DryRun puts this policy in shadow mode; see Config.DryRun.
	DryRun bool `json:"dryRun,omitempty"`
	// ExcludeLabel: a node carrying this label, whatever its value, is never fenced by
	// this policy. Default fencing.kubefence.io/exclude.
	ExcludeLabel string `json:"excludeLabel,omitempty"`
	// SkipIfNothingToRelease holds a node that runs no StatefulSet pod and has no
	// ReadWriteOnce volume attached: fencing it would release nothing that Kubernetes does
	// not already reschedule by itself. Default false.
	SkipIfNothingToRelease bool `json:"skipIfNothingToRelease,omitempty"`
	// Maintenance says when a silent node counts as taken out on purpose (cordoned and
	// drained, being deleted, under a NodeMaintenance) and how long that holds its fence.
	Maintenance Maintenance `json:"maintenance,omitempty"`
	// HonorTolerations shrinks the wait before a node is unhealthy to the smallest
	// tolerationSeconds its pods set for node.kubernetes.io/unreachable: their authors'
	// statement of how long they forgive an unreachable node. Only explicit
	// tolerationSeconds count, and never below the evidence floor (see
	// detection.expectedRenewInterval). Default true.
	HonorTolerations *bool `json:"honorTolerations,omitempty"`
	// HonorDisruptionBudgets shrinks the wait to MinWait for a node running a pod whose
	// PodDisruptionBudget allows no more disruptions: the application is at its limit and
	// its stuck pods are better released soon. The wait never goes below the node's
	// evidence floor (see detection.expectedRenewInterval): with kubelets renewing every
	// 10s and the default 30s threshold, a budget changes nothing; it shortens the wait only
	// where the threshold is longer than three renewal periods. Default true.
	HonorDisruptionBudgets *bool `json:"honorDisruptionBudgets,omitempty"`
	// MinWait is the floor below which tolerations and disruption budgets never shrink
	// the wait. Default 5s. The detector never waits less than the node's evidence floor
	// either (three of its own Lease renewal periods, or its Lease's duration until those
	// are measured), so a short MinWait cannot make a healthy node look dead. From 100ms
	// to 1h.
	MinWait metav1.Duration `json:"minWait,omitempty"`
}

// Maintenance is how a policy treats a node that people or the platform took out on
// purpose: such a node is held, not fenced, while it is silent, for at most MaxWindow.
type Maintenance struct {
	// MaxWindow is the longest a node under maintenance may stay silent before it is fenced
	// anyway, counted from when its evidence turned bad (its last Lease renewal). It covers
	// a patch reboot with a slow firmware POST; a node still silent after it is treated as
	// failed. From 1s to 7 days; default 1h.
	MaxWindow metav1.Duration `json:"maxWindow,omitempty"`
	// Cordoned says when a cordoned node (spec.unschedulable) counts as under maintenance:
	// WhenDrained (default: only once it has nothing left to release, no StatefulSet pod
	// and no ReadWriteOnce volume attached), Always, or Never. A cordon alone is also what
	// people do first to a node that misbehaves; holding such a node would keep its
	// StatefulSet pods stuck, so by default a cordon counts only after a drain.
	Cordoned CordonRule `json:"cordoned,omitempty"`
}

// CordonRule says when a cordoned node counts as under maintenance.
type CordonRule string

// The cordon rules.
const (
	CordonWhenDrained CordonRule = "WhenDrained"
	CordonAlways      CordonRule = "Always"
	CordonNever       CordonRule = "Never"
)

// Level is one fencing level: a set of agents tried together.
type Level struct {
	// Agents are names from Config.Agents; at most 10. Empty for a watchdog level.
	Agents []string `json:"agents,omitempty"`
	// Watchdog makes this the node's own watchdog level: no agent is called, and the node
	// counts as fenced once it must have reset (docs/safety-model.md, section 9). Only a
	// node whose agent reported an armed watchdog shortly before qualifies; for any other
	// the level fails at once, saying why. Its timeout must leave room for the wait:
	// isolation + 2 × the watchdog's timeout, and the reports' latency.
	Watchdog bool `json:"watchdog,omitempty"`
	// Mode is all (default: every agent must verify) or any (one suffices).
	Mode LevelMode `json:"mode,omitempty"`
	// Timeout bounds one try of this level, from the Fence call to a verified state. From
	// 100ms to 1h; default 60s.
	Timeout metav1.Duration `json:"timeout,omitempty"`
	// Retries is how many times a failed try is repeated before escalating: 0 to 20,
	// default 1.
	Retries *int32 `json:"retries,omitempty"`
	// Backoff is the wait before the first retry; it doubles with each retry. From 1ms
	// to 10m.
	Backoff metav1.Duration `json:"backoff,omitempty"`
}

// Budget limits fencing so that a partition is not mistaken for many dead nodes.
type Budget struct {
	// MaxConcurrent is how many fencing operations may run at once. From 1 to 10000;
	// default 10.
	MaxConcurrent int32 `json:"maxConcurrent,omitempty"`
	// MaxUnhealthy is a count or a percentage of the nodes this policy selects; when more
	// nodes are unhealthy, nothing is fenced (storm hold). While the unhealthy nodes and
	// those with bad evidence not yet past its threshold (suspect) together are more, a
	// decision waits until the suspects are judged: nodes that die together cross the
	// threshold up to a renewal period apart. A count of 0 or more, or a percentage from
	// 0% to 100%; default 40%.
	MaxUnhealthy *intstr.IntOrString `json:"maxUnhealthy,omitempty"`
	// PerZone holds fencing of a node whose zone (label topology.kubernetes.io/zone) has
	// no healthy node left: a dark zone is far more likely a network partition than every
	// machine in it dying at once. Default true.
	PerZone *bool `json:"perZone,omitempty"`
	// Cooldown is how long after a fence of a node started that the same node may not be
	// fenced again; a node that dies again that soon needs a person. From 1s to 168h;
	// default 10m.
	Cooldown metav1.Duration `json:"cooldown,omitempty"`
	// RateLimit bounds how fast fences start, across the cluster.
	RateLimit RateLimit `json:"rateLimit,omitempty"`
	// ControlPlaneOneAtATime fences nodes labelled node-role.kubernetes.io/control-plane
	// one at a time, so that etcd and the API server keep their quorum. Default true.
	ControlPlaneOneAtATime *bool `json:"controlPlaneOneAtATime,omitempty"`
}

// RateLimit is a token bucket: Burst fences may start at once, and then one more every
// 1/FencesPerMinute minutes.
type RateLimit struct {
	// FencesPerMinute refills the bucket; 0 (the default) means no rate limit, leaving
	// maxConcurrent and maxUnhealthy as the bounds. At most 1000.
	FencesPerMinute int32 `json:"fencesPerMinute,omitempty"`
	// Burst is the bucket's size; default FencesPerMinute, at most 1000.
	Burst int32 `json:"burst,omitempty"`
}
