package nodeagent

import (
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/clock"

	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

// Config is what one node's agent is given: its clients, its node and the values of
// cmd/fence-node-agent's flags. The agent's running state is Agent's own.
type Config struct {
	// Clients are the agent's API clients.
	Clients Clients
	// Node is the agent's node; Namespace holds its report Lease.
	Node, Namespace string
	// BootID is the boot the node runs in.
	BootID string
	// Timing is how often the agent reads and reports, and how long its node may go
	// without a read.
	Timing Timing
	// Watchdog is the node's watchdog, nil for none; WatchdogTimeout its countdown.
	Watchdog        watchdog.Device
	WatchdogTimeout time.Duration
	// Clock is the real clock when nil.
	Clock clock.WithTicker
	// Peers, when set, is where the agent answers the other agents and probes them; the
	// others are found through their reports.
	Peers *PeerConfig
}

// Clients are the agent's API clients.
type Clients struct {
	Kube     kubernetes.Interface
	Fencing  versioned.Interface
	Metadata metadata.Interface
}

// Timing is the agent's periods.
type Timing struct {
	// Isolation is selffence.Live's limit: how long the node may go without a quorum read
	// (or, once peers answer, a majority of them) before it stops feeding its watchdog.
	Isolation time.Duration
	// ReadEvery is how often the agent reads the NodeFences; at most a third of Isolation.
	ReadEvery time.Duration
	// ReportEvery is how often the report is written when nothing in it changed.
	ReportEvery time.Duration
}

// Validate checks the settings, naming the flag-like field that is wrong.
func (c Config) Validate() error {
	t := c.Timing
	switch {
	case c.Node == "":
		return fmt.Errorf("node name: empty (--node-name, or NODE_NAME from the downward API's spec.nodeName)")
	case c.Namespace == "":
		return fmt.Errorf("namespace: empty (--namespace, or POD_NAMESPACE from the downward API)")
	case c.BootID == "":
		return fmt.Errorf("boot ID: empty (--boot-id-file)")
	case t.Isolation <= 0:
		return fmt.Errorf("isolation %s: must be positive", t.Isolation)
	case t.ReadEvery <= 0 || 3*t.ReadEvery > t.Isolation:
		return fmt.Errorf("read interval %s: must be positive and at most a third of isolation (%s), so that one failed read never isolates the node", t.ReadEvery, t.Isolation)
	case t.ReportEvery < t.ReadEvery:
		return fmt.Errorf("report interval %s: must be at least the read interval %s", t.ReportEvery, t.ReadEvery)
	case c.Watchdog != nil && c.WatchdogTimeout < time.Second:
		return fmt.Errorf("watchdog timeout %s: at least 1s (watchdogs count in seconds)", c.WatchdogTimeout)
	}
	return nil
}
