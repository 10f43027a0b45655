package nodeagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/selffence"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

// Agent is one node's agent: its Config and what it knows and keeps while it runs.
type Agent struct {
	cfg Config

	// mu guards known, and feeder and peers, which Run sets.
	mu      sync.Mutex
	known   knowledge
	feeder  *watchdog.Feeder
	peers   *Peers
	joining sync.Mutex // one Join at a time
	writer  reportWriter
}

// knowledge is what the agent's reads told it.
type knowledge struct {
	apiRead  time.Time
	readOnce bool     // a read has succeeded: the agent knows what it answers
	fenced   []Entry  // the NodeFences past their budget in the latest read
	holds    []string // their names, for the report
	members  []string
	readErr  string
	loopedAt time.Time
}

// reportWriter is the state of the report's writes. mu serializes them; final is set
// once the agent reported that it disarms, after which nothing else is written.
type reportWriter struct {
	mu     sync.Mutex
	final  bool
	lease  *coordinationv1.Lease
	last   *Report
	lastAt time.Time
}

// New returns the agent that cfg configures; Run checks cfg (Config.Validate).
func New(cfg Config) *Agent {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Agent{cfg: cfg}
}

var nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// Run reads, feeds and reports until ctx ends. It returns the watchdog's error, if arming
// or disarming it failed.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.cfg.Validate(); err != nil {
		return err
	}
	// The member list comes from a cache: a stale list can only make the node's
	// watchdog ineligible (the controller compares the reported list with its own), never
	// keep a node alive that the cluster wants fenced, which is up to the quorum reads.
	inf := metadatainformer.NewFilteredMetadataInformer(a.cfg.Clients.Metadata, nodesResource, "", 0, cache.Indexers{}, nil).Informer()
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	var reports cache.SharedIndexInformer
	if a.cfg.Peers != nil {
		peers, err := StartPeers(*a.cfg.Peers, a.ownRead, a.cfg.Clock)
		if err != nil {
			return err
		}
		defer peers.Stop()
		a.mu.Lock()
		a.peers = peers
		a.mu.Unlock()
		reports = informers.NewSharedInformerFactoryWithOptions(a.cfg.Clients.Kube, 0, informers.WithNamespace(a.cfg.Namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ComponentLabel + "=" + Component })).
			Coordination().V1().Leases().Informer()
		go reports.Run(ctx.Done())
		go a.ask(ctx)
	}
	fed := make(chan error, 1)
	if a.cfg.Watchdog != nil {
		feeder := &watchdog.Feeder{Dev: a.cfg.Watchdog, Timeout: a.cfg.WatchdogTimeout, Live: a.live, Clock: a.cfg.Clock, Disarming: a.reportDisarm}
		a.mu.Lock()
		a.feeder = feeder
		a.mu.Unlock()
		go func() {
			err := feeder.Run(ctx)
			if err != nil {
				klog.ErrorS(err, "The watchdog is not fed", "node", a.cfg.Node)
			}
			fed <- err
		}()
	} else {
		fed <- nil
	}
	tick := a.cfg.Clock.NewTicker(a.cfg.Timing.ReadEvery)
	defer tick.Stop()
	for {
		a.setMembers(inf.GetStore().ListKeys())
		a.read(ctx)
		a.report(ctx)
		if reports != nil {
			go a.join(reports.GetStore().List())
		}
		select {
		case <-ctx.Done():
			return <-fed
		case <-tick.C():
		}
	}
}

// ask asks the peers for the answers a majority needs (Peers.Ask) while the agent's own
// read of the NodeFences is older than half of isolation, every isolation/20, on a ticker
// of its own: a read and a report write that each time out in an API server outage
// delay the read loop's rounds by up to two read intervals, and questions that wait for
// them come too late (TestOutageKeepsEveryNodeAliveAtABoundedCost). An answer younger
// than half of isolation is not asked for again, so each member answers about twice per
// isolation, and the half left gives the rounds ten more chances to get it before it
// expires.
func (a *Agent) ask(ctx context.Context) {
	every := max(a.cfg.Timing.Isolation/20, time.Millisecond)
	tick := a.cfg.Clock.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
		a.mu.Lock()
		read, members := a.known.apiRead, a.known.members
		a.mu.Unlock()
		if a.cfg.Clock.Since(read) > a.cfg.Timing.Isolation/2 {
			a.peers.Ask(members, a.cfg.Timing.Isolation/2, 2*every)
		}
	}
}

// Healthy fails when the agent's loop has not run for three read intervals.
func (a *Agent) Healthy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.known.loopedAt.IsZero() {
		return fmt.Errorf("not started")
	}
	if since := a.cfg.Clock.Since(a.known.loopedAt); since > 3*a.cfg.Timing.ReadEvery {
		return fmt.Errorf("the read loop last ran %s ago", since.Round(time.Millisecond))
	}
	return nil
}

func (a *Agent) setMembers(names []string) {
	slices.Sort(names)
	a.mu.Lock()
	a.known.members = names
	a.mu.Unlock()
}

// PastBudgetSelector selects the NodeFences past their budget (PastBudget) on the API
// server: every agent reads every read interval, and the incidents that ended (the
// history, kept for days) are most of what there is to send.
var PastBudgetSelector = v1alpha1.PhaseNotIn(append([]v1alpha1.Phase{"", v1alpha1.PhasePending, v1alpha1.PhaseHeld}, v1alpha1.EndedPhases...)...)

// read lists the NodeFences past their budget with a quorum read (no resourceVersion),
// and on success counts it from when it began. An API server that refuses the selector
// (a CRD from before status.phase was selectable) gets a list of them all.
func (a *Agent) read(ctx context.Context) {
	began := a.cfg.Clock.Now()
	rctx, cancel := context.WithTimeout(ctx, a.cfg.Timing.ReadEvery)
	defer cancel()
	nfs := a.cfg.Clients.Fencing.FencingV1alpha1().NodeFences()
	list, err := nfs.List(rctx, metav1.ListOptions{FieldSelector: PastBudgetSelector})
	if apierrors.IsBadRequest(err) {
		list, err = nfs.List(rctx, metav1.ListOptions{})
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.known.loopedAt = a.cfg.Clock.Now()
	if err != nil {
		if a.known.readErr == "" {
			klog.ErrorS(err, "Reading the NodeFences failed", "node", a.cfg.Node)
		}
		a.known.readErr = err.Error()
		return
	}
	if a.known.readErr != "" {
		klog.InfoS("Reading the NodeFences works again", "node", a.cfg.Node)
	}
	a.known.readErr = ""
	a.known.apiRead, a.known.readOnce = began, true
	var fenced []Entry
	var holds []string
	for i := range list.Items {
		if nf := &list.Items[i]; PastBudget(nf) {
			fenced = append(fenced, Entry{Node: nf.Spec.NodeName, UID: string(nf.UID)})
			holds = append(holds, nf.Name)
		}
	}
	slices.Sort(holds)
	a.known.holds = holds
	if slices.Contains(nodesOf(fenced), a.cfg.Node) && !slices.Contains(nodesOf(a.known.fenced), a.cfg.Node) {
		klog.InfoS("The cluster wants this node fenced", "node", a.cfg.Node)
	}
	a.known.fenced = fenced
	if a.peers != nil {
		a.peers.Forget(fenced, began)
	}
}

// nodesOf are the nodes of entries, sorted, each once.
func nodesOf(entries []Entry) []string {
	nodes := make([]string, 0, len(entries))
	for _, e := range entries {
		nodes = append(nodes, e.Node)
	}
	slices.Sort(nodes)
	return slices.Compact(nodes)
}

// join asks the agents whose reports give an address, and that are not members yet, to
// take this one in; a Join still running is left to finish.
func (a *Agent) join(leases []any) {
	if !a.joining.TryLock() {
		return
	}
	defer a.joining.Unlock()
	// Only the reports of nodes that are not members are decoded: the loop runs every
	// read interval, and decoding every report each time was a fifth of an agent's CPU
	// at 100 nodes, all of it for members gossip already keeps.
	known := a.peers.memberNames()
	addrs := map[string]string{}
	for _, obj := range leases {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			continue
		}
		node := NodeOf(l)
		if node == "" || node == a.cfg.Node || known[node] {
			continue
		}
		if r, err := Decode(l); err == nil && r.Peer != "" {
			addrs[node] = r.Peer
		}
	}
	if len(addrs) > 0 {
		a.peers.join(known, addrs)
	}
}

// ownRead are the NodeFences past their budget in the agent's latest read, and whether it
// has read them yet: before that, it answers its peers "don't know".
func (a *Agent) ownRead() ([]Entry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.known.fenced), a.known.readOnce
}

// PastBudget says whether nf asks its node to be fenced now: open, and past Pending and
// Held, so that a node waits for its incident's budget like any other.
func PastBudget(nf *v1alpha1.NodeFence) bool {
	switch nf.Status.Phase {
	case "", v1alpha1.PhasePending, v1alpha1.PhaseHeld:
		return false
	}
	return nf.Status.Phase.Open()
}

// live is selffence.Live on what the agent knows now.
func (a *Agent) live(now time.Time) string {
	a.mu.Lock()
	v := selffence.AgentView{Node: a.cfg.Node, Members: a.known.members, APIRead: a.known.apiRead, Read: nodesOf(a.known.fenced)}
	a.mu.Unlock()
	if a.peers != nil {
		v.Acks, v.Relayed = a.peers.Acks(), a.peers.Relayed()
	}
	return selffence.Live(v, a.cfg.Timing.Isolation, now)
}

// MembersOf sums up a member list.
func MembersOf(names []string) Members {
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	sum := sha256.Sum256([]byte(strings.Join(sorted, "\n")))
	return Members{Count: len(sorted), SHA256: hex.EncodeToString(sum[:])}
}
