package nodeagent

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

const (
	// LeasePrefix starts the name of every report Lease: kubefence-node-<node>, in the
	// agents' namespace. The chart's ValidatingAdmissionPolicy holds each agent to the
	// Lease of the node its pod runs on.
	LeasePrefix = "kubefence-node-"
	// ReportAnnotation carries the report on its Lease, as JSON.
	ReportAnnotation = "fencing.kubefence.io/node-agent-report"
	// ComponentLabel is app.kubernetes.io/component on every report Lease, with value
	// Component.
	ComponentLabel = "app.kubernetes.io/component"
	Component      = "node-agent"
	// NodeLabel names the reporting node on its Lease (v1alpha1.NodeLabel's key), with
	// v1alpha1.LabelValue(node): a node name may be longer than a label value. The whole
	// name is the Lease's holder (NodeOf).
	NodeLabel = "fencing.kubefence.io/node"
	// ReportFormat is the format of the reports this build writes, and the newest it
	// reads. A report without one is of format 1, the first (v0.1.0's agents wrote none).
	// A change a reader must not miss (a new field that restricts what the controller
	// may count on) takes a new format; Decode refuses a report of a format newer than
	// its own, so a controller older than its node agents counts on none of their
	// watchdogs instead of misreading them. Adding a field an older reader may safely
	// ignore keeps the format.
	ReportFormat = 1
)

// LeaseName is the name of node's report Lease.
func LeaseName(node string) string { return LeasePrefix + node }

// NodeOf names the node whose report Lease l is: its holder, the node that wrote it, when
// its NodeLabel is that node's; otherwise "".
func NodeOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	node := *l.Spec.HolderIdentity
	if node == "" || l.Labels[NodeLabel] != v1alpha1.LabelValue(node) {
		return ""
	}
	return node
}

// Report is what a node agent publishes about its node: the watchdog it feeds, the boot
// it runs in, the member list its rule counts a majority of, and the NodeFences it
// holds. The controller counts on a node's watchdog only from these reports
// (selffence.Verify).
type Report struct {
	// Format is the report's format (ReportFormat of the agent that wrote it); 0, absent,
	// is format 1.
	Format int `json:"format,omitempty"`
	// Version is the writing agent's release (buildinfo), for people and the version
	// skew check: the controller reads it, and counts on nothing because of it.
	Version string `json:"version,omitempty"`
	// BootID is the boot the agent runs in (/proc/sys/kernel/random/boot_id).
	BootID string `json:"bootID"`
	// Watchdog is the state of the node's watchdog.
	Watchdog WatchdogReport `json:"watchdog"`
	// Members sums up the member list as of the agent's last read of the Node objects.
	Members Members `json:"members"`
	// Isolation is the agent's --isolation (Go duration).
	Isolation string `json:"isolation"`
	// ReportInterval is the agent's --report-interval (Go duration): a live agent writes
	// its report at least that often, and the controller does not count on a watchdog
	// whose node lived on more than two of them after the agent's latest report.
	ReportInterval string `json:"reportInterval,omitempty"`
	// Peer is host:port where the agent answers the other agents; empty without peers.
	Peer string `json:"peer,omitempty"`
	// Holds are the names of the NodeFences the agent knows to be past their budget
	// (phase Fencing or after, still open), sorted: it passes each of them on, and for
	// one of its own node it stops feeding its watchdog. Names, not nodes: a report
	// holding an incident was made after the agent read that incident, never an older
	// one of the same node.
	Holds []string `json:"holds,omitempty"`
}

// WatchdogReport is the watchdog part of a Report.
type WatchdogReport struct {
	// Kind is "device" for a device of the Linux watchdog API and "emulated" for an
	// emulated watchdog (unix:), which resets only a test's simulated machine.
	Kind string `json:"kind,omitempty"`
	// Armed is true while the agent's watchdog is armed.
	Armed bool `json:"armed"`
	// Counting is true for a device whose arming failed but which counts down anyway
	// and cannot be stopped (nowayout): the agent feeds it while the node may live, and
	// it is not armed.
	Counting bool `json:"counting,omitempty"`
	// Timeout is the countdown in force while armed (Go duration, e.g. "5s").
	Timeout string `json:"timeout,omitempty"`
	// Stopped is why feeding stopped for good (the node resets within Timeout), or, before
	// the device is armed, why not yet. Empty while fed.
	Stopped string `json:"stopped,omitempty"`
	// Error is the last failed arm or feed.
	Error string `json:"error,omitempty"`
}

// Members sums up a member list: how many nodes, and the SHA-256 of their names sorted
// and joined with newlines, so that the controller can tell it is its own list without
// every report carrying every name.
type Members struct {
	Count  int    `json:"count"`
	SHA256 string `json:"sha256"`
}

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Encode writes r onto lease (the annotation), with the labels and holder that mark it
// as node's report.
func (r Report) Encode(lease *coordinationv1.Lease, node string) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	lease.Labels[ComponentLabel] = Component
	lease.Labels[NodeLabel] = v1alpha1.LabelValue(node)
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[ReportAnnotation] = string(data)
	lease.Spec.HolderIdentity = &node
	return nil
}

// Decode reads the report of lease, and says which field is wrong when it is.
func Decode(lease *coordinationv1.Lease) (Report, error) {
	where := fmt.Sprintf("report Lease %s/%s", lease.Namespace, lease.Name)
	raw, ok := lease.Annotations[ReportAnnotation]
	if !ok {
		return Report{}, fmt.Errorf("%s: no annotation %s", where, ReportAnnotation)
	}
	var r Report
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return Report{}, fmt.Errorf("%s: annotation %s: %w", where, ReportAnnotation, err)
	}
	if err := r.validate(); err != nil {
		return Report{}, fmt.Errorf("%s: annotation %s: %w", where, ReportAnnotation, err)
	}
	return r, nil
}

func (r Report) validate() error {
	switch {
	case r.Format < 0:
		return fmt.Errorf("format %d: negative", r.Format)
	case r.Format > ReportFormat:
		return fmt.Errorf("format %d (node agent %s): newer than this controller reads (at most %d); upgrade the controller before the node agents",
			r.Format, orUnknown(r.Version), ReportFormat)
	}
	if r.Watchdog.Armed {
		d, err := time.ParseDuration(r.Watchdog.Timeout)
		if err != nil || d <= 0 {
			return fmt.Errorf("watchdog.timeout %q: an armed watchdog needs a positive duration", r.Watchdog.Timeout)
		}
	}
	if d, err := time.ParseDuration(r.Isolation); err != nil || d <= 0 {
		return fmt.Errorf("isolation %q: not a positive duration", r.Isolation)
	}
	if d, err := time.ParseDuration(r.ReportInterval); r.ReportInterval != "" && (err != nil || d <= 0) {
		return fmt.Errorf("reportInterval %q: not a positive duration", r.ReportInterval)
	}
	switch r.Watchdog.Kind {
	case "", watchdog.KindDevice, watchdog.KindEmulated:
	default:
		return fmt.Errorf("watchdog.kind %q: want %s or %s", r.Watchdog.Kind, watchdog.KindDevice, watchdog.KindEmulated)
	}
	if r.Members.Count < 0 {
		return fmt.Errorf("members.count %d: negative", r.Members.Count)
	}
	if r.Members.Count > 0 && !hexSHA256.MatchString(r.Members.SHA256) {
		return fmt.Errorf("members.sha256 %q: not 64 lowercase hex digits", r.Members.SHA256)
	}
	if !slices.IsSorted(r.Holds) || len(slices.Compact(slices.Clone(r.Holds))) != len(r.Holds) {
		return fmt.Errorf("holds %v: not sorted and distinct", r.Holds)
	}
	for i, n := range r.Holds {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			return fmt.Errorf("holds[%d] %q: not a NodeFence name: %s", i, n, errs[0])
		}
	}
	return nil
}

func orUnknown(v string) string {
	if v == "" {
		return "of an unknown version"
	}
	return v
}

// IsolationLimit is the agent's isolation (Decode checked it).
func (r Report) IsolationLimit() time.Duration {
	d, _ := time.ParseDuration(r.Isolation)
	return d
}

// Every is the agent's report interval, zero when the report does not say (an older
// agent).
func (r Report) Every() time.Duration {
	d, _ := time.ParseDuration(r.ReportInterval)
	return d
}

// WatchdogTimeout is the timeout in force, zero when not armed.
func (r Report) WatchdogTimeout() time.Duration {
	if !r.Watchdog.Armed {
		return 0
	}
	d, _ := time.ParseDuration(r.Watchdog.Timeout)
	return d
}

// renewed stamps lease as renewed at now, for a reader that looks at the Lease alone.
func renewed(lease *coordinationv1.Lease, now time.Time, every time.Duration) {
	t := metav1.NewMicroTime(now)
	lease.Spec.RenewTime = &t
	secs := int32(every.Seconds() * 3)
	lease.Spec.LeaseDurationSeconds = &secs
}
