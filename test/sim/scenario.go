package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Scenario is one scripted rehearsal of a failure, read from a YAML file written for a
// person to read: the cluster, what happens to it and when, and what kubefence must do.
// The invariant checker runs on every scenario whatever its expectations say.
type Scenario struct {
	// Name identifies the scenario; the file name when empty.
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Nodes is the number of simulated nodes, node-1 … node-N, each with an ipmi_sim BMC.
	Nodes int `json:"nodes"`
	// Zones maps a zone name to the nodes labelled topology.kubernetes.io/zone with it.
	Zones map[string][]string `json:"zones,omitempty"`
	// Controllers is how many fence-controller replicas run: controller-a, controller-b, …
	Controllers int `json:"controllers,omitempty"`
	// Profile is fast (kubelet Lease renewed every 1s, leaseStaleAfter 5s, leader election
	// 4s/3s/0.5s) or default (every timing at its default). Default fast.
	Profile string `json:"profile,omitempty"`
	// StatefulSet is deployed before the steps start, one pod per node at most, each pod
	// with a read-write-once volume; "@web-0" in steps names the node its pod web-0 runs on.
	StatefulSet StatefulSetSpec `json:"statefulSet"`
	// Storage, when "iscsi", starts a real tgtd with one target per node whose ACL admits
	// only that node's initiator IQN, and installs fence-agent-iscsi as agent "iscsi".
	Storage string `json:"storage,omitempty"`
	// BMC makes every node's BMC slow to power off (offDelay).
	BMC BMCSpec `json:"bmc,omitempty"`
	// Config is merged over the controller's configuration (objects merge, lists replace).
	Config map[string]any `json:"config,omitempty"`
	// Policy is merged over every policy of the configuration.
	Policy map[string]any `json:"policy,omitempty"`
	// Steps happen in order.
	Steps []Step `json:"steps"`
	// Expect is what must have happened once the steps are done.
	Expect Expect `json:"expect"`
	// Timeout bounds the whole scenario after the cluster is up; default 3m.
	Timeout Duration `json:"timeout,omitzero"`
	// NodeAgents, when set, runs fence-node-agent on every node (NodeAgents), and sets
	// the controller's watchdog.isolation to theirs.
	NodeAgents *NodeAgentsSpec `json:"nodeAgents,omitempty"`
	// PauseAt is a test pause point of the controller (controller.Pause*): the first
	// replica stops itself (SIGSTOP) the first time it gets there; resumePaused continues
	// it. Replicas started later do not pause.
	PauseAt string `json:"pauseAt,omitempty"`
}

// NodeAgentsSpec are the node agents' settings.
type NodeAgentsSpec struct {
	// WatchdogTimeout is each emulated watchdog's countdown; default 5s.
	WatchdogTimeout Duration `json:"watchdogTimeout,omitzero"`
	// Isolation and ReadInterval are the agents' flags; default 2s and 500ms.
	Isolation    Duration `json:"isolation,omitzero"`
	ReadInterval Duration `json:"readInterval,omitzero"`
	// Unarmed are the nodes ("node-N" or "@pod") whose agent runs without a watchdog.
	Unarmed []string `json:"unarmed,omitempty"`
	// Peers makes the agents answer each other; a partition cuts a node from its peers too.
	Peers bool `json:"peers,omitempty"`
	// Heartbeats seats every controller replica among the peers (config heartbeats);
	// needs peers.
	Heartbeats bool `json:"heartbeats,omitempty"`
	// Batch starts the agents that many at a time (NodeAgentOptions.Batch); 0: all at once.
	Batch int `json:"batch,omitempty"`
}

// StatefulSetSpec is the workload the scenario protects.
type StatefulSetSpec struct {
	Name     string `json:"name,omitempty"`
	Replicas int    `json:"replicas"`
	// Guarded adds a PodDisruptionBudget with minAvailable = replicas: it allows no
	// disruption, which shrinks the policy's wait to minWait (never below the evidence
	// floor).
	Guarded bool `json:"guarded,omitempty"`
}

// BMCSpec tunes every BMC.
type BMCSpec struct {
	OffDelay Duration `json:"offDelay,omitzero"`
}

// Step is one thing that happens to the cluster. It starts at At (from the moment the
// steps begin) or After (from the end of the previous step), then, if Until is set,
// once that condition holds; then Action runs.
type Step struct {
	At     Duration   `json:"at,omitzero"`
	After  Duration   `json:"after,omitzero"`
	Until  *Condition `json:"until,omitempty"`
	Action string     `json:"action"`
	// Node, Nodes or Zone name the nodes the action applies to: "node-2", "@web-0".
	Node  string   `json:"node,omitempty"`
	Nodes []string `json:"nodes,omitempty"`
	Zone  string   `json:"zone,omitempty"`
	// Count and Down/Up shape a flap: Count times down for Down, then up for Up.
	Count int      `json:"count,omitempty"`
	Down  Duration `json:"down,omitzero"`
	Up    Duration `json:"up,omitzero"`
	// DownFor is how long restartAPIServer keeps kube-apiserver stopped.
	DownFor Duration `json:"downFor,omitzero"`
}

// Condition is something a step waits for before it acts.
type Condition struct {
	// Node whose incident or BMC is watched.
	Node string `json:"node"`
	// Phase: the node's incident has been seen in this phase.
	Phase string `json:"phase,omitempty"`
	// BMC: the node's BMC logged this action (e.g. off-requested, off).
	BMC string `json:"bmc,omitempty"`
	// Count: Phase has been seen on this many of the node's incidents (default 1).
	Count int `json:"count,omitempty"`
	// Timeout bounds the wait; default 2m.
	Timeout Duration `json:"timeout,omitzero"`
}

// Expect is what kubefence must have done by the end.
type Expect struct {
	// Incidents: each node's incident must reach the phase (seen by the recorder).
	Incidents []IncidentExpect `json:"incidents,omitempty"`
	// Moved: these StatefulSet pods run on another node than at the start.
	Moved []string `json:"moved,omitempty"`
	// NothingFenced: no power off, no storage cut and no release on any node.
	NothingFenced bool `json:"nothingFenced,omitempty"`
	// NoResets: no watchdog reset any node (nodeAgents), disturbed or not.
	NoResets bool `json:"noResets,omitempty"`
	// Hold is how long the expected phases must stay (a Held incident stays Held and
	// nothing is fenced meanwhile).
	Hold Duration `json:"hold,omitzero"`
	// Within bounds the wait for the expectations; default 2m.
	Within Duration `json:"within,omitzero"`
	// PausedExit: the replica paused by pauseLeader must have exited with this code once
	// resumed (a deposed leader exits with 2).
	PausedExit *int `json:"pausedExit,omitempty"`
	// Levels: the node's incident was verified at this fencing level.
	Levels map[string]int `json:"levels,omitempty"`
}

// IncidentExpect is one node's expected incident phase.
type IncidentExpect struct {
	Node  string `json:"node"`
	Phase string `json:"phase"`
	// Message, when set, must be part of the incident's status.message.
	Message string `json:"message,omitempty"`
	// Reason, when set, must be part of the incident's spec.reason: the evidence.
	Reason string `json:"reason,omitempty"`
}

// Duration is a time.Duration written as "5s" in YAML.
type Duration struct{ time.Duration }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var m metav1.Duration
	if err := m.UnmarshalJSON(b); err != nil {
		return err
	}
	d.Duration = m.Duration
	return nil
}

// MarshalJSON writes a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return metav1.Duration{Duration: d.Duration}.MarshalJSON()
}

// Actions a step may take.
const (
	ActPartition        = "partition"        // kubelet stops, machine stays on: cut from the API server
	ActPowerLoss        = "powerLoss"        // the machine loses power (by the sim's hand)
	ActHeal             = "heal"             // a partitioned kubelet comes back with the same boot
	ActRestart          = "restart"          // kubelet back after a reboot (new boot ID)
	ActFlap             = "flap"             // Count times: partition for Down, restart, up for Up
	ActPowerOn          = "powerOn"          // switch a fenced node on again (it boots anew)
	ActStopBMC          = "stopBMC"          // the node's BMC becomes unreachable (ipmi_sim stopped)
	ActKillLeader       = "killLeader"       // SIGKILL the leading replica and its agents
	ActPauseLeader      = "pauseLeader"      // SIGSTOP the leading replica
	ActResumePaused     = "resumePaused"     // SIGCONT the replica paused earlier
	ActKillAgent        = "killAgent"        // SIGKILL the leader's fence-agent-ipmi child
	ActRestartAPIServer = "restartAPIServer" // stop kube-apiserver, DownFor later start it again
	ActEditTarget       = "editTarget"       // the node's BMC annotation is edited to name a spare machine's BMC, switched off
	ActReleaseEarly     = "releaseEarly"     // planted bug: release the node's pods and volumes now
	ActIgnoreBMC        = "ignoreBMC"        // planted bug: the machine keeps running whatever its BMC says
	ActCrash            = "crash"            // the machine dies without its BMC (needs nodeAgents)
	ActRollNodeAgents   = "rollNodeAgents"   // every node agent ends (SIGTERM) and starts again, one at a time, as a DaemonSet rollout
	ActKillNodeAgents   = "killNodeAgents"   // every node agent is SIGKILLed and starts again
	ActKillNodeAgent    = "killNodeAgent"    // the node's agent is SIGKILLed for good; its kubelet runs on
	ActStopNodeAgent    = "stopNodeAgent"    // the node's agent is SIGTERMed for good (helm uninstall, a nodeSelector change)
	// ActCutNodeAgentFromAPIServer: the node's agent reaches the API server no more; its
	// peers still hear it and its kubelet runs on.
	ActCutNodeAgentFromAPIServer = "cutNodeAgentFromAPIServer"
	// ActWait does nothing: a step that only waits (at, after, until) for the next.
	ActWait = "wait"
	// ActCutFromController cuts the node off from every controller replica (their peer
	// traffic and the probes of its kubelet), while its peers and the API server still
	// hear it.
	ActCutFromController = "cutFromController"
	// ActCutFromAPIServer: the kubelet runs on and answers on its port, but reaches the
	// API server no more.
	ActCutFromAPIServer = "cutFromAPIServer"
	// ActRestartControllers terminates every live replica, as a rollout or an upgrade does;
	// each is started again a second later (a new process with fresh clocks).
	ActRestartControllers = "restartControllers"
	// ActStopLeader terminates the leading replica (SIGTERM): a clean handover, the Lease
	// given up at once and a standby leading 2 s later; its supervisor starts it again.
	ActStopLeader = "stopLeader"
	// ActFailSave needs pauseAt afterFenceCall: once a replica has stopped itself right
	// after a Fence call, the API server goes down for downFor and the replica is resumed
	// meanwhile, so the save of the call's answer fails and its outcome is lost.
	ActFailSave = "failSaveAfterFence"
)

// nodeActions act on the nodes a step names (node, nodes or zone); without one they would
// do nothing and a scenario would pass without testing anything.
var nodeActions = map[string]bool{ActPartition: true, ActPowerLoss: true, ActHeal: true, ActRestart: true,
	ActFlap: true, ActPowerOn: true, ActStopBMC: true, ActReleaseEarly: true, ActIgnoreBMC: true, ActCrash: true,
	ActKillNodeAgent: true, ActCutFromController: true, ActCutFromAPIServer: true, ActEditTarget: true,
	ActStopNodeAgent: true, ActCutNodeAgentFromAPIServer: true}

var knownActions = map[string]bool{ActPartition: true, ActPowerLoss: true, ActHeal: true, ActRestart: true,
	ActFlap: true, ActPowerOn: true, ActStopBMC: true, ActKillLeader: true, ActPauseLeader: true,
	ActResumePaused: true, ActKillAgent: true, ActRestartAPIServer: true, ActReleaseEarly: true, ActIgnoreBMC: true,
	ActRestartControllers: true, ActCrash: true, ActRollNodeAgents: true, ActKillNodeAgents: true,
	ActKillNodeAgent: true, ActCutFromController: true, ActCutFromAPIServer: true, ActEditTarget: true,
	ActStopNodeAgent: true, ActCutNodeAgentFromAPIServer: true, ActWait: true, ActStopLeader: true, ActFailSave: true}

// agentActions need nodeAgents.
var agentActions = map[string]bool{ActCrash: true, ActRollNodeAgents: true, ActKillNodeAgents: true, ActKillNodeAgent: true,
	ActStopNodeAgent: true, ActCutNodeAgentFromAPIServer: true}

// Profiles.
const (
	ProfileFast    = "fast"
	ProfileDefault = "default"
)

// LoadScenario reads and checks one scenario file.
func LoadScenario(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load scenario: %w", err)
	}
	sc, err := ParseScenario(b)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	if sc.Name == "" {
		sc.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return sc, nil
}

// LoadScenarios reads every *.yaml of dir, sorted by name.
func LoadScenarios(dir string) ([]*Scenario, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []*Scenario
	for _, p := range paths {
		sc, err := LoadScenario(p)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

// ParseScenario decodes a scenario strictly (an unknown field is an error), applies
// defaults and validates it.
func ParseScenario(b []byte) (*Scenario, error) {
	var sc Scenario
	if err := yaml.UnmarshalStrict(b, &sc); err != nil {
		return nil, err
	}
	sc.setDefaults()
	return &sc, sc.Validate()
}

func (sc *Scenario) setDefaults() {
	if sc.Controllers == 0 {
		sc.Controllers = 1
	}
	if sc.Profile == "" {
		sc.Profile = ProfileFast
	}
	if sc.StatefulSet.Name == "" {
		sc.StatefulSet.Name = "web"
	}
	if sc.Timeout.Duration == 0 {
		sc.Timeout.Duration = 3 * time.Minute
	}
	if sc.Expect.Within.Duration == 0 {
		sc.Expect.Within.Duration = 2 * time.Minute
	}
	if a := sc.NodeAgents; a != nil {
		for d, v := range map[*Duration]time.Duration{&a.WatchdogTimeout: 5 * time.Second, &a.Isolation: 2 * time.Second, &a.ReadInterval: 500 * time.Millisecond} {
			if d.Duration == 0 {
				d.Duration = v
			}
		}
	}
}

// Marshal writes the scenario back as YAML, e.g. the steps a seed generated.
func (sc *Scenario) Marshal() ([]byte, error) { return yaml.Marshal(sc) }
