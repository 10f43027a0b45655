package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/test/sim/bmc"
	"github.com/kubefence/kubefence/test/sim/tgt"
)

// The invariant checker shares no code with the controller. Its evidence is what the
// machines and the storage server say (the BMCs' own power logs, the tgtd ACLs read with
// tgtadm, the simulated machines' running containers) and what an independent watcher saw
// on the API server (Recorder).

// Storage is the iSCSI side of the simulation: one target per node admitting only that
// node's initiator.
type Storage struct {
	Server *tgt.Server
	// TIDs maps a node to the tid of its target.
	TIDs map[string]int
	// Initiators maps a node to its initiator IQN.
	Initiators map[string]string
}

// span is a period during which a node was cut from its storage; To is zero while open.
type span struct{ From, To time.Time }

// Monitor samples the ground truth while a scenario runs: which machine runs which pods
// (Node.RunningPods, powered as the machine itself is), and which nodes tgtd admits.
type Monitor struct {
	h       *Harness
	storage *Storage
	every   time.Duration

	mu         sync.Mutex
	copies     map[string]string // pod → violation, first seen
	cut        map[string][]span
	initialACL map[string][]string
	lastACL    map[string][]string
	restored   map[string][]restore
	samples    int
	errs       []string
	done       chan struct{}
}

// StartMonitor samples every interval until ctx ends; Stop waits for the last sample.
func StartMonitor(ctx context.Context, h *Harness, storage *Storage, every time.Duration) (*Monitor, error) {
	m := &Monitor{h: h, storage: storage, every: every, copies: map[string]string{},
		cut: map[string][]span{}, done: make(chan struct{})}
	if storage != nil {
		acl, err := m.readACLs(ctx)
		if err != nil {
			return nil, fmt.Errorf("monitor: initial ACLs: %w", err)
		}
		m.initialACL, m.lastACL = acl, acl
	}
	go m.loop(ctx)
	return m, nil
}

func (m *Monitor) loop(ctx context.Context) {
	defer close(m.done)
	tick := time.NewTicker(m.every)
	defer tick.Stop()
	for {
		m.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Settle waits until the monitor has taken n more samples, so that what the last step
// changed is sampled before the verdict.
func (m *Monitor) Settle(ctx context.Context, n int) {
	m.mu.Lock()
	want := m.samples + n
	m.mu.Unlock()
	_ = pollUntil(ctx, m.every, time.Minute, func(context.Context) (bool, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.samples >= want, nil
	})
}

// Wait returns once the sampling loop has ended (its context was cancelled).
func (m *Monitor) Wait() { <-m.done }

func (m *Monitor) sample(ctx context.Context) {
	now := time.Now()
	if m.storage != nil {
		acl, err := m.readACLs(ctx)
		if err != nil {
			if ctx.Err() == nil {
				m.note("read tgtd ACLs: %v", err)
			}
			return
		}
		m.updateCuts(acl, now)
	}
	running := map[string][]string{}
	for _, n := range m.h.Cluster.Nodes() {
		// A machine that is off runs nothing, whatever its kubelet last recorded; one cut
		// from its storage cannot write to a volume even if its containers run.
		on, err := m.h.machines[n.Name()].PoweredOn()
		if err != nil || !on || m.CutAt(n.Name(), now) {
			continue
		}
		for _, p := range n.RunningPods() {
			running[p] = append(running[p], n.Name())
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.samples++
	for pod, nodes := range running {
		if len(nodes) > 1 && m.copies[pod] == "" {
			m.copies[pod] = fmt.Sprintf("split brain at %s: pod %s runs on %v at once, each powered on and admitted to storage",
				now.Format(time.RFC3339Nano), pod, nodes)
		}
	}
}

func (m *Monitor) note(format string, a ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.errs) < 5 {
		m.errs = append(m.errs, fmt.Sprintf(format, a...))
	}
}

func (m *Monitor) updateCuts(acl map[string][]string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastACL = acl
	for node, iqn := range m.storage.Initiators {
		isCut := !slices.Contains(acl[node], iqn)
		spans := m.cut[node]
		open := len(spans) > 0 && spans[len(spans)-1].To.IsZero()
		switch {
		case isCut && !open:
			m.cut[node] = append(spans, span{From: now})
		case !isCut && open:
			spans[len(spans)-1].To = now
			m.noteRestore(node, now)
		}
	}
}

// CutAt reports whether the node was observed cut from its storage at t. The first
// observation is later than the cut itself, so this never claims a cut too early.
func (m *Monitor) CutAt(node string, t time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.cut[node] {
		if !t.Before(s.From) && (s.To.IsZero() || t.Before(s.To)) {
			return true
		}
	}
	return false
}

// readACLs returns every node target's ACL with one tgtadm call.
func (m *Monitor) readACLs(ctx context.Context) (map[string][]string, error) {
	out, err := m.storage.Server.Tgtadm(ctx, "--op", "show", "--mode", "target")
	if err != nil {
		return nil, err
	}
	byTID := parseACLs(out)
	acl := map[string][]string{}
	for node, tid := range m.storage.TIDs {
		acl[node] = byTID[tid]
	}
	return acl, nil
}

// parseACLs reads the "ACL information:" section of every target in `tgtadm --op show
// --mode target`; section headers are indented by four spaces, their lines by more.
func parseACLs(out string) map[int][]string {
	acl := map[int][]string{}
	tid, inACL := 0, false
	for _, raw := range strings.Split(out, "\n") {
		line := strings.TrimSpace(raw)
		switch {
		case strings.HasPrefix(raw, "Target "):
			num, _, _ := strings.Cut(strings.TrimPrefix(raw, "Target "), ":")
			tid, _ = strconv.Atoi(num)
			inACL = false
			acl[tid] = []string{}
		case line == "":
		case strings.HasPrefix(raw, "    ") && !strings.HasPrefix(raw, "     "):
			inACL = line == "ACL information:"
		case inACL:
			acl[tid] = append(acl[tid], line)
		}
	}
	return acl
}

// Evidence is everything the checker judges, gathered once the scenario is over.
type Evidence struct {
	Seen []Seen
	// Power is each node's BMC log.
	Power map[string][]bmc.PowerEvent
	// Disturbed are the nodes the scenario harmed; every other node is healthy.
	Disturbed map[string]bool
	// Taints are each node's taint keys at the end.
	Taints map[string][]string
	// Final is each node's newest incident at the end, if any; Incidents all of them.
	Final     map[string]*v1alpha1.NodeFence
	Incidents map[string][]v1alpha1.NodeFence
	// Resets are when each node's watchdog reset its machine; Halts when the simulation
	// killed a machine without its BMC (NodeAgents).
	Resets, Halts map[string][]time.Time
}

// downBefore reports whether one of times is before t: the machine stopped then (a reset
// or a halt stops every container; a reset machine's kubelet stays cut off in the
// scenarios that partition it).
func downBefore(times []time.Time, t time.Time) bool {
	for _, at := range times {
		if at.Before(t) {
			return true
		}
	}
	return false
}

// Check returns every violated invariant.
func (m *Monitor) Check(ev Evidence) []string {
	var v []string
	v = append(v, m.checkReleases(ev)...)
	v = append(v, checkOpenIncidents(ev.Seen)...)
	v = append(v, m.checkHealthy(ev)...)
	v = append(v, m.checkLeftovers(ev)...)
	v = append(v, m.checkRestores(ev)...)
	for _, n := range slices.Sorted(maps.Keys(ev.Power)) {
		v = append(v, CheckOneOffAtATime(n, ev.Power[n])...)
	}
	m.mu.Lock()
	pods := make([]string, 0, len(m.copies))
	for p := range m.copies {
		pods = append(pods, p)
	}
	sort.Strings(pods)
	for _, p := range pods {
		v = append(v, m.copies[p])
	}
	if m.samples == 0 {
		v = append(v, "monitor took no sample: the split-brain check saw nothing")
	}
	for _, e := range m.errs {
		v = append(v, "monitor: "+e)
	}
	m.mu.Unlock()
	return v
}

// poweredOffAt replays a BMC log: the machine is off at t when the last power change
// before t switched it off (by the BMC or by hand). A reset or an "on" runs it again;
// an off-request or an ignored off changes nothing.
func poweredOffAt(events []bmc.PowerEvent, t time.Time) bool {
	off := false
	for _, e := range events {
		if !e.Time.Before(t) {
			break
		}
		switch e.Action {
		case bmc.ActionOff:
			off = true
		case bmc.ActionOn, bmc.ActionReset:
			off = false
		}
	}
	return off
}

// checkReleases: no pod deleted or marked, no volume attachment removed and no
// out-of-service taint added for a node that could still run and write (invariant 1).
func (m *Monitor) checkReleases(ev Evidence) []string {
	var v []string
	for _, s := range ev.Seen {
		if s.Node == "" || !releaseKinds[s.Kind] {
			continue
		}
		if poweredOffAt(ev.Power[s.Node], s.At) || m.CutAt(s.Node, s.At) || downBefore(ev.Resets[s.Node], s.At) || downBefore(ev.Halts[s.Node], s.At) {
			continue
		}
		v = append(v, fmt.Sprintf("released while the node could still run: %s %s of node %s at %s; its BMC had not logged power off, its storage was not cut, and it was neither reset by its watchdog nor halted",
			s.Kind, s.Object, s.Node, s.At.Format(time.RFC3339Nano)))
	}
	return v
}

// checkOpenIncidents: at most one open incident per node at any time (invariant 3).
func checkOpenIncidents(seen []Seen) []string {
	node, open := map[string]string{}, map[string]bool{}
	var v []string
	reported := map[string]bool{}
	for _, s := range seen {
		if s.Kind != SeenIncidentPhase {
			continue
		}
		node[s.Object], open[s.Object] = s.Node, v1alpha1.Phase(s.Detail).Open()
		var names []string
		for name, isOpen := range open {
			if isOpen && node[name] == s.Node {
				names = append(names, name)
			}
		}
		if len(names) > 1 && !reported[s.Node] {
			sort.Strings(names)
			reported[s.Node] = true
			v = append(v, fmt.Sprintf("two open incidents for node %s at %s: %v", s.Node, s.At.Format(time.RFC3339Nano), names))
		}
	}
	return v
}

// checkHealthy: a node the scenario never harmed is never fenced, released or cut, and
// no node is fenced while its kubelet renews on time (within two renewal periods).
func (m *Monitor) checkHealthy(ev Evidence) []string {
	var v []string
	for _, n := range m.h.Cluster.Nodes() {
		name := n.Name()
		// A halted machine may be fenced on heartbeat evidence after 1.5 of its measured
		// renewal periods: a quarter period of slack below that for the ticker's jitter.
		interval := m.h.Cluster.opts.LeaseRenewInterval
		v = append(v, CheckRenewingNotFenced(name, n.Renewals(), ev.Power[name], ev.Halts[name], 2*interval, interval*5/4)...)
		if ev.Disturbed[name] {
			continue
		}
		v = append(v, CheckUntouched(ev.Seen, name, ev.Power[name])...)
		for _, at := range ev.Resets[name] {
			v = append(v, fmt.Sprintf("healthy node %s: reset by its watchdog at %s", name, at.Format(time.RFC3339Nano)))
		}
		m.mu.Lock()
		if len(m.cut[name]) > 0 {
			v = append(v, fmt.Sprintf("healthy node %s: cut from its storage at %s", name, m.cut[name][0].From.Format(time.RFC3339Nano)))
		}
		m.mu.Unlock()
	}
	return v
}

// checkLeftovers: a node that is back (its incident recovered or cancelled, or never
// had one) carries no kubefence taint and has its storage ACL as it was at the start.
func (m *Monitor) checkLeftovers(ev Evidence) []string {
	var v []string
	for _, n := range m.h.Cluster.Nodes() {
		name := n.Name()
		if nf := ev.Final[name]; nf != nil && nf.Status.Phase.Open() {
			continue
		}
		for _, key := range ev.Taints[name] {
			if key == outOfServiceKey || strings.HasPrefix(key, v1alpha1.GroupName+"/") {
				v = append(v, fmt.Sprintf("node %s is back but still carries taint %s", name, key))
			}
		}
		if m.storage == nil {
			continue
		}
		m.mu.Lock()
		before, after := m.initialACL[name], m.lastACL[name]
		m.mu.Unlock()
		if !slices.Equal(before, after) {
			v = append(v, fmt.Sprintf("node %s is back but its target ACL is %v, was %v", name, after, before))
		}
	}
	return v
}

// GatherEvidence reads the BMC logs, taints and newest incidents.
func GatherEvidence(ctx context.Context, h *Harness, rec *Recorder, disturbed map[string]bool) (Evidence, error) {
	ev := Evidence{Seen: rec.All(), Power: map[string][]bmc.PowerEvent{}, Disturbed: disturbed,
		Taints: map[string][]string{}, Final: map[string]*v1alpha1.NodeFence{}, Incidents: map[string][]v1alpha1.NodeFence{}}
	for name, b := range h.BMCs {
		e, err := b.Events()
		if err != nil {
			return ev, err
		}
		ev.Power[name] = e
	}
	nodes, err := h.Cluster.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ev, err
	}
	for _, n := range nodes.Items {
		for _, t := range n.Spec.Taints {
			ev.Taints[n.Name] = append(ev.Taints[n.Name], t.Key)
		}
		incs, err := Incidents(ctx, h.Cluster, n.Name)
		if err != nil {
			return ev, err
		}
		if len(incs) > 0 {
			ev.Final[n.Name] = &incs[len(incs)-1]
		}
		ev.Incidents[n.Name] = incs
	}
	return ev, nil
}
