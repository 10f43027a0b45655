package oncall

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Devices is the leader's answer to `fence-controller devices`: the last read of every
// node's first-level fence device by its device monitor (at start, then every
// --target-check-interval, and at once after a node's mapping changes), as JSON on its
// answer socket and in `kubectl fence status -o json`.
type Devices struct {
	// Leader is the identity of the leading replica that answered.
	Leader string `json:"leader"`
	// LastRound is when its last round of every node's reads ended; nil before the first.
	LastRound *time.Time   `json:"lastRound,omitempty"`
	Reads     []DeviceRead `json:"reads"`
}

// DeviceRead is one device's last read.
type DeviceRead struct {
	Node   string `json:"node"`
	Agent  string `json:"agent"`
	Target string `json:"target"`
	// State is what the agent read (on, off, unknown), or error.
	State string `json:"state"`
	// Identity is the device's identity against the node's, as `fence-controller check`
	// says it ("MISMATCH: ...": the target is another machine; "not checked").
	Identity string `json:"identity"`
	// DeviceIdentity is the device's own identity, NodeIdentity the node's; empty when
	// not known.
	DeviceIdentity string `json:"deviceIdentity,omitempty"`
	NodeIdentity   string `json:"nodeIdentity,omitempty"`
	// At is when the device's answer came back, on the leader's clock; nil when no call
	// reached it (Error says why).
	At      *time.Time      `json:"at,omitempty"`
	Latency metav1.Duration `json:"latency"`
	// Error is the agent's error, which never quotes a secret.
	Error string `json:"error,omitempty"`
}

// PrintDevices writes d as a table, its ages counted from now: a first line that says
// which leader answered and when its last round ended, then node, agent, target, state,
// the device's identity against the node's, the read's age, its latency and its error.
func PrintDevices(w io.Writer, d Devices, now time.Time) error {
	round := "it has not ended a round of reads yet"
	if d.LastRound != nil {
		round = fmt.Sprintf("its last round of reads ended %s ago (%s)", age(now, *d.LastRound), d.LastRound.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "answered:  by the leader %s; %s\n", d.Leader, round)
	if len(d.Reads) == 0 {
		_, err := fmt.Fprintln(w, "No device read: no node's policy names a first-level agent, or every node is excluded or under maintenance.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tAGENT\tTARGET\tSTATE\tIDENTITY\tREAD\tLATENCY\tERROR")
	for _, r := range d.Reads {
		read := "not reached"
		if r.At != nil {
			read = age(now, *r.At) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Node, r.Agent, r.Target, r.State, r.Identity, read,
			r.Latency.Round(time.Millisecond), strings.Join(strings.Fields(r.Error), " "))
	}
	return tw.Flush()
}

func age(now, t time.Time) string { return duration.HumanDuration(now.Sub(t)) }
