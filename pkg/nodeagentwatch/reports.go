package nodeagentwatch

import (
	"fmt"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/fencer"
	"github.com/kubefence/kubefence/pkg/nodeagent"
	"github.com/kubefence/kubefence/pkg/oncall/life"
	"github.com/kubefence/kubefence/pkg/selffence"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

// armedKept is how many observations of armed reports are kept per node: enough to find
// the last one before an incident started fencing while later ones arrive.
const armedKept = 8

// watchdogs follows the node agents' reports (their Leases) for the watchdog level, each
// as this replica observed it, on its own clock: an observation is never earlier than
// the report it sees, so every time it yields errs late, which only makes the wait
// longer (docs/safety-model.md, section 9). Standby replicas follow them too, so that a
// new leader knows what was reported before it took over.
type watchdogs struct {
	cfg v1alpha1.WatchdogConfig
	now func() time.Time

	mu sync.Mutex
	// latest is each node's latest report; rv its Lease's resourceVersion, so that an
	// informer's resync is not taken for a new report.
	latest map[string]seenReport
	// armed are when the latest reports of an armed watchdog were observed, per node,
	// oldest first.
	armed map[string][]time.Time
	// held is, per NodeFence, when each member was first seen holding it, since its
	// reports last stopped doing so.
	held map[string]map[string]time.Time
}

type seenReport struct {
	rv     string
	at     time.Time
	report nodeagent.Report
	err    error
	// seen is at with how long the report counts (life.ReportSeen).
	seen life.Seen
}

func newWatchdogs(cfg v1alpha1.WatchdogConfig, now func() time.Time) *watchdogs {
	return &watchdogs{cfg: cfg, now: now, latest: map[string]seenReport{}, armed: map[string][]time.Time{},
		held: map[string]map[string]time.Time{}}
}

// observe records a report Lease as seen now, and returns the incidents it holds that
// no earlier report of the node held. A member whose report no longer holds an incident
// (an agent restarted and not read yet, or one that lost it) holds it no more: should it
// hold it again, it counts from then. Only a member that held the NodeFence all along
// must pass it on in every answer, which Verify's majority rests on.
func (w *watchdogs) observe(l *coordinationv1.Lease) []string {
	node := nodeagent.NodeOf(l)
	if node == "" || l.Name != nodeagent.LeaseName(node) {
		return nil
	}
	r, err := nodeagent.Decode(l)
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if prev, ok := w.latest[node]; ok && prev.rv == l.ResourceVersion {
		return nil
	}
	w.latest[node] = seenReport{rv: l.ResourceVersion, at: now, report: r, err: err, seen: life.ReportSeen(l, now, w.cfg.ReportMaxAge.Duration)}
	for name, holders := range w.held {
		if _, ok := holders[node]; ok && (err != nil || !slices.Contains(r.Holds, name)) {
			delete(holders, node)
		}
	}
	if err != nil {
		return nil
	}
	if r.Watchdog.Armed {
		w.armed[node] = append(w.armed[node], now)
		if n := len(w.armed[node]); n > armedKept {
			w.armed[node] = w.armed[node][n-armedKept:]
		}
	}
	var added []string
	for _, name := range r.Holds {
		if w.held[name] == nil {
			w.held[name] = map[string]time.Time{}
		}
		if _, ok := w.held[name][node]; !ok {
			w.held[name][node] = now
			added = append(added, name)
		}
	}
	return added
}

// peers are the agents' peer addresses, by node, as their latest reports give them.
func (w *watchdogs) peers() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]string{}
	for node, r := range w.latest {
		if r.err == nil && r.report.Peer != "" {
			out[node] = r.report.Peer
		}
	}
	return out
}

// reported is node's agent's latest report as a sign of the node's life (a report that
// cannot be read still shows its writer alive); zero for none.
func (w *watchdogs) reported(node string) life.Seen {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest[node].seen
}

// forget drops what is kept of a deleted incident, or of a deleted node's agent.
func (w *watchdogs) forget(incident, node string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if incident != "" {
		delete(w.held, incident)
	}
	if node != "" {
		delete(w.latest, node)
		delete(w.armed, node)
	}
}

// verdict is selffence.Verify for incident nf of node, with members the cluster's Node
// objects, lastLife the latest sign of the kubelet's life this replica saw and left the
// latest goodbye of the node's agent its seat among the peers saw. issued says the
// level's attempt already passed its Fence step, which a node that was not eligible then
// fails: so the node was armed when the incident started fencing, even if this replica
// (a new leader, started since) never saw that report.
func (w *watchdogs) verdict(nf *v1alpha1.NodeFence, node *corev1.Node, members []*corev1.Node, lastLife, left time.Time, issued bool) selffence.Verdict {
	visible := fencer.StepTime(nf, v1alpha1.StepFenceStarted)
	if visible.IsZero() {
		visible = nf.CreationTimestamp.Time
	}
	names := make([]string, 0, len(members))
	var newest time.Time
	for _, m := range members {
		names = append(names, m.Name)
		if t := m.CreationTimestamp.Time; t.After(newest) {
			newest = t
		}
	}
	w.mu.Lock()
	seen, ok := w.latest[node.Name]
	c := selffence.Case{Visible: visible, BootID: node.Status.NodeInfo.BootID, Members: names, NewestMember: newest,
		Held: map[string]time.Time{}, LastLife: lastLife, KubeletLife: lastLife, AgentLeft: left}
	for _, at := range w.armed[node.Name] {
		if !at.After(visible) {
			c.ArmedBefore = at
		}
	}
	if c.ArmedBefore.IsZero() && issued {
		c.ArmedBefore = visible
	}
	for m, at := range w.held[nf.Name] {
		c.Held[m] = at
	}
	w.mu.Unlock()
	no := func(format string, args ...any) selffence.Verdict {
		return selffence.Verdict{State: selffence.Ineligible, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case !ok:
		return no("node %s: no report from its node agent (Lease %s/%s)", node.Name, w.cfg.Namespace, nodeagent.LeaseName(node.Name))
	case seen.err != nil:
		return no("node %s: %v", node.Name, seen.err)
	case seen.report.IsolationLimit() > w.cfg.Isolation.Duration:
		return no("node %s: its agent's isolation %s is longer than watchdog.isolation %s", node.Name, seen.report.Isolation, w.cfg.Isolation.Duration)
	case seen.report.Watchdog.Armed && seen.report.Watchdog.Kind == "":
		return no("node %s: its agent's report does not say what its watchdog is (an agent older than this controller)", node.Name)
	}
	r := seen.report
	if want := nodeagent.MembersOf(names); r.Members != want {
		return no("node %s: its agent's member list (%d nodes, sha256 %.12s) is not the cluster's (%d nodes, sha256 %.12s)",
			node.Name, r.Members.Count, r.Members.SHA256, want.Count, want.SHA256)
	}
	// The report's own sign of life: the node's agent wrote it.
	if seen.at.After(c.LastLife) {
		c.LastLife = seen.at
	}
	c.Report = &selffence.Report{At: seen.at, Armed: r.Watchdog.Armed, Timeout: r.WatchdogTimeout(), BootID: r.BootID, Members: names,
		Every: r.Every(), Emulated: r.Watchdog.Kind == watchdog.KindEmulated}
	v := selffence.Verify(c, selffence.Params{Isolation: w.cfg.Isolation.Duration, ReportMaxAge: w.cfg.ReportMaxAge.Duration,
		AllowEmulated: w.cfg.AllowEmulated}, w.now())
	if v.State == selffence.Ineligible {
		v.Reason = "node " + node.Name + ": " + v.Reason
	}
	return v
}
