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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/generated/clientset/versioned"
	"github.com/kubefence/kubefence/pkg/selffence"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

// Agent is one node's agent.
type Agent struct {
	Kube     kubernetes.Interface
	Fencing  versioned.Interface
	Metadata metadata.Interface
	// Node is the agent's node; Namespace holds its report Lease.
	Node, Namespace string
	// BootID is the boot the node runs in.
	BootID string
	// Isolation is selffence.Live's limit: how long the node may go without a quorum read
	// (or, once peers answer, a majority of them) before it stops feeding its watchdog.
	Isolation time.Duration
	// ReadEvery is how often the agent reads the NodeFences; at most a third of Isolation.
	ReadEvery time.Duration
	// ReportEvery is how often the report is written when nothing in it changed.
	ReportEvery time.Duration
	// Watchdog is the node's watchdog, nil for none; WatchdogTimeout its countdown.
	Watchdog        watchdog.Device
	WatchdogTimeout time.Duration
	// Clock is the real clock when nil.
	Clock clock.WithTicker
	// Peers, when set, is where the agent answers the other agents and probes them; the
	// others are found through their reports.
	Peers *PeerConfig

	mu       sync.Mutex
	apiRead  time.Time
	readOnce bool     // a read has succeeded: the agent knows what it answers
	fenced   []Entry  // the NodeFences past their budget in the latest read
	holds    []string // their names, for the report
	members  []string
	readErr  string
	loopedAt time.Time
	feeder   *watchdog.Feeder
	peers    *Peers
	joining  sync.Mutex // one Join at a time

	// writing serializes the report's writes; final is set once the agent reported
	// that it disarms, after which nothing else is written.
	writing sync.Mutex
	final   bool
	lease   *coordinationv1.Lease
	last    *Report
	lastAt  time.Time
}

// Validate checks the settings, naming the flag-like field that is wrong.
func (a *Agent) Validate() error {
	switch {
	case a.Node == "":
		return fmt.Errorf("node name: empty (--node-name, or NODE_NAME from the downward API's spec.nodeName)")
	case a.Namespace == "":
		return fmt.Errorf("namespace: empty (--namespace, or POD_NAMESPACE from the downward API)")
	case a.BootID == "":
		return fmt.Errorf("boot ID: empty (--boot-id-file)")
	case a.Isolation <= 0:
		return fmt.Errorf("isolation %s: must be positive", a.Isolation)
	case a.ReadEvery <= 0 || 3*a.ReadEvery > a.Isolation:
		return fmt.Errorf("read interval %s: must be positive and at most a third of isolation (%s), so that one failed read never isolates the node", a.ReadEvery, a.Isolation)
	case a.ReportEvery < a.ReadEvery:
		return fmt.Errorf("report interval %s: must be at least the read interval %s", a.ReportEvery, a.ReadEvery)
	case a.Watchdog != nil && a.WatchdogTimeout < time.Second:
		return fmt.Errorf("watchdog timeout %s: at least 1s (watchdogs count in seconds)", a.WatchdogTimeout)
	}
	return nil
}

var nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// Run reads, feeds and reports until ctx ends. It returns the watchdog's error, if arming
// or disarming it failed.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.Validate(); err != nil {
		return err
	}
	if a.Clock == nil {
		a.Clock = clock.RealClock{}
	}
	// The member list comes from a cache: a stale list can only make the node's
	// watchdog ineligible (the controller compares the reported list with its own), never
	// keep a node alive that the cluster wants fenced, which is up to the quorum reads.
	inf := metadatainformer.NewFilteredMetadataInformer(a.Metadata, nodesResource, "", 0, cache.Indexers{}, nil).Informer()
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	var reports cache.SharedIndexInformer
	if a.Peers != nil {
		peers, err := StartPeers(*a.Peers, a.ownRead, a.Clock)
		if err != nil {
			return err
		}
		defer peers.Stop()
		a.mu.Lock()
		a.peers = peers
		a.mu.Unlock()
		reports = informers.NewSharedInformerFactoryWithOptions(a.Kube, 0, informers.WithNamespace(a.Namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ComponentLabel + "=" + Component })).
			Coordination().V1().Leases().Informer()
		go reports.Run(ctx.Done())
		go a.ask(ctx)
	}
	fed := make(chan error, 1)
	if a.Watchdog != nil {
		feeder := &watchdog.Feeder{Dev: a.Watchdog, Timeout: a.WatchdogTimeout, Live: a.live, Clock: a.Clock, Disarming: a.reportDisarm}
		a.mu.Lock()
		a.feeder = feeder
		a.mu.Unlock()
		go func() {
			err := feeder.Run(ctx)
			if err != nil {
				klog.ErrorS(err, "The watchdog is not fed", "node", a.Node)
			}
			fed <- err
		}()
	} else {
		fed <- nil
	}
	tick := a.Clock.NewTicker(a.ReadEvery)
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
	every := max(a.Isolation/20, time.Millisecond)
	tick := a.Clock.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
		a.mu.Lock()
		read, members := a.apiRead, a.members
		a.mu.Unlock()
		if a.Clock.Since(read) > a.Isolation/2 {
			a.peers.Ask(members, a.Isolation/2, 2*every)
		}
	}
}

// Healthy fails when the agent's loop has not run for three read intervals.
func (a *Agent) Healthy() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.loopedAt.IsZero() {
		return fmt.Errorf("not started")
	}
	if since := a.Clock.Since(a.loopedAt); since > 3*a.ReadEvery {
		return fmt.Errorf("the read loop last ran %s ago", since.Round(time.Millisecond))
	}
	return nil
}

func (a *Agent) setMembers(names []string) {
	slices.Sort(names)
	a.mu.Lock()
	a.members = names
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
	began := a.Clock.Now()
	rctx, cancel := context.WithTimeout(ctx, a.ReadEvery)
	defer cancel()
	nfs := a.Fencing.FencingV1alpha1().NodeFences()
	list, err := nfs.List(rctx, metav1.ListOptions{FieldSelector: PastBudgetSelector})
	if apierrors.IsBadRequest(err) {
		list, err = nfs.List(rctx, metav1.ListOptions{})
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.loopedAt = a.Clock.Now()
	if err != nil {
		if a.readErr == "" {
			klog.ErrorS(err, "Reading the NodeFences failed", "node", a.Node)
		}
		a.readErr = err.Error()
		return
	}
	if a.readErr != "" {
		klog.InfoS("Reading the NodeFences works again", "node", a.Node)
	}
	a.readErr = ""
	a.apiRead, a.readOnce = began, true
	var fenced []Entry
	var holds []string
	for i := range list.Items {
		if nf := &list.Items[i]; PastBudget(nf) {
			fenced = append(fenced, Entry{Node: nf.Spec.NodeName, UID: string(nf.UID)})
			holds = append(holds, nf.Name)
		}
	}
	slices.Sort(holds)
	a.holds = holds
	if slices.Contains(nodesOf(fenced), a.Node) && !slices.Contains(nodesOf(a.fenced), a.Node) {
		klog.InfoS("The cluster wants this node fenced", "node", a.Node)
	}
	a.fenced = fenced
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
		if node == "" || node == a.Node || known[node] {
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
	return slices.Clone(a.fenced), a.readOnce
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
	v := selffence.AgentView{Node: a.Node, Members: a.members, APIRead: a.apiRead, Read: nodesOf(a.fenced)}
	a.mu.Unlock()
	if a.peers != nil {
		v.Acks, v.Relayed = a.peers.Acks(), a.peers.Relayed()
	}
	return selffence.Live(v, a.Isolation, now)
}

// MembersOf sums up a member list.
func MembersOf(names []string) Members {
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	sum := sha256.Sum256([]byte(strings.Join(sorted, "\n")))
	return Members{Count: len(sorted), SHA256: hex.EncodeToString(sum[:])}
}
