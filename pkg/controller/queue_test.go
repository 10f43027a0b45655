package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kubefence/kubefence/pkg/apis/fencing/v1alpha1"
	"github.com/kubefence/kubefence/pkg/leader"
)

// The informers' handlers and the work queue: what makes a node be looked at, and how a
// sync's outcome decides when it is looked at again.

// queued drains the controller's queue and returns its keys, sorted.
func queued(c *Controller) []string {
	var keys []string
	for c.queue.Len() > 0 {
		k, _ := c.queue.Get()
		c.queue.Done(k)
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// identityLease is the identity Lease of replica running on node, renewed at renewed.
func identityLease(replica, node string, renewed time.Time) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leader.LeaseName("controller", replica), Namespace: v1alpha1.DefaultLeaseNamespace,
			Labels: map[string]string{leader.IdentityLabel: "true", leader.ComponentLabel: "controller", v1alpha1.NodeLabel: node}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &replica, RenewTime: &rt}}
}

// TestHandlersQueueTheNode: every change the watches deliver about a node (the Node, its
// kubelet's Lease, one of its incidents, the tombstone of a deletion the watch missed)
// queues that node by name; anything else, or an incident naming no node, queues
// nothing; a burst of changes to one node costs one sync.
func TestHandlersQueueTheNode(t *testing.T) {
	node := fixtureNode("node-1", "boot-node-1", true)
	nf := fencedIncident(v1alpha1.PhaseFencing, v1alpha1.AttemptFencing)
	nameless := nf.DeepCopy()
	nameless.Spec.NodeName = ""
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0"}}
	for name, tc := range map[string]struct {
		deliver func(c *Controller)
		want    []string
	}{
		"node added":   {func(c *Controller) { c.enqueueObject(node) }, []string{"node-1"}},
		"node deleted": {func(c *Controller) { c.enqueueObject(cache.DeletedFinalStateUnknown{Key: "node-1", Obj: node}) }, []string{"node-1"}},
		"a pod":        {func(c *Controller) { c.enqueueObject(pod) }, nil},
		"a pod's tombstone": {func(c *Controller) { c.enqueueObject(cache.DeletedFinalStateUnknown{Key: "default/web-0", Obj: pod}) },
			nil},
		"node Lease renewed":      {func(c *Controller) { c.onLease(fixtureLease("node-1", f0)) }, []string{"node-1"}},
		"not a Lease":             {func(c *Controller) { c.onLease(node) }, nil},
		"incident changed":        {func(c *Controller) { c.onNodeFence(nf) }, []string{"node-1"}},
		"incident naming no node": {func(c *Controller) { c.onNodeFence(nameless) }, nil},
		"not an incident":         {func(c *Controller) { c.onNodeFence(node) }, nil},
		"all of them at once": {func(c *Controller) {
			c.enqueueObject(node)
			c.onLease(fixtureLease("node-1", f0))
			c.onNodeFence(nf)
		}, []string{"node-1"}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, fixtureConfig(), threeNodes()...)
			tc.deliver(f.c)
			if got := queued(f.c); !slices.Equal(got, tc.want) {
				t.Errorf("queued %v, want %v", got, tc.want)
			}
		})
	}
}

// TestLeaseRenewalFromTheWatch: a renewal the watch delivers is evidence of life at
// once: a node whose kubelet renewed just as its Lease was about to be stale is not
// fenced, and no incident opens.
func TestLeaseRenewalFromTheWatch(t *testing.T) {
	f := newFixture(t, fixtureConfig(), threeNodes()...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	renewed := fixtureLease("node-1", f.clock.Now())
	if err := f.c.opts.Caches.NodeLeases.Coordination().V1().Leases().Informer().GetIndexer().Update(renewed); err != nil {
		t.Fatal(err)
	}
	f.c.onLease(renewed)
	if got := queued(f.c); !slices.Equal(got, []string{"node-1"}) {
		t.Errorf("queued %v, want node-1", got)
	}
	f.requests()
	f.sync("node-1")
	f.expectRequests()
	f.expectCalls()
}

// TestIdentityLeaseHoldsItsNode: a controller replica that renews its identity Lease
// proves that its node is alive, whatever that node's kubelet says; its node's incident
// is held and no agent is called. A Lease that names no node proves nothing.
func TestIdentityLeaseHoldsItsNode(t *testing.T) {
	for name, tc := range map[string]struct {
		node  string
		phase v1alpha1.Phase
		calls []string
	}{
		"replica on the dead node": {"node-1", v1alpha1.PhaseHeld, nil},
		"replica on no known node": {"", v1alpha1.PhaseRemediated, []string{"Fence bmc-node-1", "Status bmc-node-1"}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, fixtureConfig(), threeNodes()...)
			// Seen renewing 10 s before the sync, within three renew intervals of it.
			f.clock.Set(f0.Add(50 * time.Second))
			f.c.peers.replicas.Observe(identityLease("replica-b", tc.node, f.clock.Now()), f.clock.Now())
			f.clock.Set(f0.Add(time.Minute))
			f.renewAllBut("node-1")
			f.sync("node-1")
			f.expectCalls(tc.calls...)
			nf := f.incident("node-1")
			if nf.Status.Phase != tc.phase {
				t.Errorf("phase %s, want %s (%s)", nf.Status.Phase, tc.phase, nf.Status.Message)
			}
			if held := tc.phase == v1alpha1.PhaseHeld; held && !strings.Contains(nf.Status.Message, "replica replica-b") {
				t.Errorf("held with %q, want the replica named as the evidence", nf.Status.Message)
			}
		})
	}
}

// recordingQueue is the controller's queue, recording how keys are put back after their
// sync instead of putting them back.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	log []string
}

func (q *recordingQueue) AddRateLimited(key string) { q.log = append(q.log, "rate-limited "+key) }
func (q *recordingQueue) AddAfter(key string, d time.Duration) {
	q.log = append(q.log, fmt.Sprintf("after %s %s", d, key))
}
func (q *recordingQueue) Forget(key string) {
	q.log = append(q.log, "forget "+key)
	q.TypedRateLimitingInterface.Forget(key)
}

// TestProcessNext: a sync that fails is retried with per-node backoff (an unreadable
// policy must not spin a worker); one that asks to look again is requeued after exactly
// that long, with its backoff reset; one that needs nothing more is forgotten. Either
// way the key is released, so the node's next change queues it again.
func TestProcessNext(t *testing.T) {
	for name, tc := range map[string]struct {
		key      string
		at       time.Duration
		selector *metav1.LabelSelector
		want     []string
	}{
		"policy unreadable": {"node-1", time.Minute, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "zone", Operator: "Near", Values: []string{"a"}}}}, []string{"rate-limited node-1"}},
		// The Lease turns stale 30 s after its renewal at f0.
		"suspect node, looked at when it would turn unhealthy": {"node-1", 20 * time.Second, nil,
			[]string{"forget node-1", "after 10s node-1"}},
		"healthy node, looked at again later": {"node-3", 20 * time.Second, nil, []string{"forget node-3", "after 30s node-3"}},
		"node gone":                           {"node-9", 20 * time.Second, nil, []string{"forget node-9"}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := fixtureConfig()
			cfg.Policies[0].NodeSelector = tc.selector
			f := newFixture(t, cfg, threeNodes()...)
			q := &recordingQueue{TypedRateLimitingInterface: f.c.queue}
			f.c.queue = q
			f.clock.Set(f0.Add(tc.at))
			f.renewAllBut("node-1")
			q.Add(tc.key)
			if !f.c.processNext(context.Background()) {
				t.Fatal("processNext reported the queue shut down")
			}
			if !slices.Equal(q.log, tc.want) {
				t.Errorf("requeue %v, want %v", q.log, tc.want)
			}
			q.Add(tc.key)
			if got := queued(f.c); !slices.Equal(got, []string{tc.key}) {
				t.Errorf("queued %v after the next change, want %s: the key was not released", got, tc.key)
			}
		})
	}
}

// TestWorkerDrainsTheQueue: a worker syncs the queued nodes one after another, the dead
// one fenced, and returns once the queue is shut down and empty (leadership lost), so
// that Run's workers end with it.
func TestWorkerDrainsTheQueue(t *testing.T) {
	f := newFixture(t, fixtureConfig(), threeNodes()...)
	f.clock.Set(f0.Add(time.Minute))
	f.renewAllBut("node-1")
	for _, n := range []string{"node-3", "node-1", "node-2", "node-1"} {
		f.c.queue.Add(n)
	}
	f.c.queue.ShutDown()
	f.c.worker(context.Background())
	if n := f.c.queue.Len(); n != 0 {
		t.Errorf("%d keys left in the queue", n)
	}
	f.expectCalls("Fence bmc-node-1", "Status bmc-node-1")
	if nf := f.incident("node-1"); nf.Status.Phase != v1alpha1.PhaseRemediated {
		t.Errorf("phase %s, want Remediated", nf.Status.Phase)
	}
	if f.c.processNext(context.Background()) {
		t.Error("processNext on a shut-down, empty queue reported more work")
	}
}

// startInformers runs the controller's informers on the fixture's fake API servers
// until the test ends, and returns once their caches synced and the watches of
// incidents and identity Leases are open: what the test changes next reaches the
// handlers, as it does in a running controller.
func (f *fixture) startInformers() {
	f.t.Helper()
	var mu sync.Mutex
	watching := map[string]bool{}
	for _, cs := range []interface {
		PrependWatchReactor(string, k8stesting.WatchReactionFunc)
		Tracker() k8stesting.ObjectTracker
	}{f.kube, f.dyn} {
		tracker := cs.Tracker()
		cs.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
			// Open the watch (from the listing's resourceVersion, as the fakes' own
			// reactor does) before saying so: a change made after the signal is seen.
			var opts metav1.ListOptions
			if wa, ok := a.(k8stesting.WatchActionImpl); ok {
				opts = wa.ListOptions
			}
			w, err := tracker.Watch(a.GetResource(), a.GetNamespace(), opts)
			mu.Lock()
			watching[a.GetResource().Resource+" "+a.GetNamespace()] = true
			mu.Unlock()
			return true, w, err
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(func() {
		cancel()
		set := f.c.opts.Caches
		set.Kube.Shutdown()
		set.NodeLeases.Shutdown()
		set.Identities.Shutdown()
		set.Fencing.Shutdown()
		set.Reports.Shutdown()
	})
	if err := f.c.opts.Caches.Start(ctx); err != nil {
		f.t.Fatal(err)
	}
	f.eventually("watches open", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return watching["nodefences "] && watching["leases "+f.c.cfg.LeaderElection.Namespace]
	})
}

// eventually polls cond until it holds, failing the test if it does not within a
// deadline far beyond what the informers need.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		f.t.Fatalf("%s: %v", what, err)
	}
}

// TestDeletedIncidentIsForgotten: a person deletes an incident the controller wrote a
// moment ago, before the watch brought that write back. The controller must stop driving
// it: its own last write (which stands in for a cache that lags) and the Events waiting
// on its next save go with it, instead of resurrecting a deleted incident.
func TestDeletedIncidentIsForgotten(t *testing.T) {
	ctx := context.Background()
	nf := fencedIncident(v1alpha1.PhaseRemediated, v1alpha1.AttemptVerified)
	f := newFixture(t, fixtureConfig(), append(threeNodes(), nf)...)
	f.startInformers()
	mine := nf.DeepCopy()
	mine.Status.Message = "released"
	if err := f.c.record.Save(ctx, mine); err != nil {
		t.Fatal(err)
	}
	f.c.record.Event(nil, mine, corev1.EventTypeNormal, v1alpha1.ReasonRemediated, "waiting on the next save")
	if err := f.dyn.FencingV1alpha1().NodeFences().Delete(ctx, nf.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("the deleted incident forgotten", func() bool {
		if _, cached, _ := nfIndexer(f.c).GetByKey(nf.Name); cached {
			return false // not deleted from the cache yet: the store still has a reason to hold the write
		}
		incs, err := f.c.store.ForNode("node-1")
		pending := f.c.record.Held(nf.Name)
		return err == nil && len(incs) == 0 && pending == 0
	})
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("events %q about a deleted incident", ev)
	}
}

// TestInformersFollowTheCluster: once the informers run, every node is queued from the
// initial listing, and identity Leases are followed as replicas come and go: a replica
// that leaves (its Lease deleted on a clean exit) no longer holds its node back.
func TestInformersFollowTheCluster(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, fixtureConfig(), threeNodes()...)
	f.clock.Set(f0.Add(time.Minute))
	f.startInformers()
	// The handlers see the initial listing after the caches have it.
	f.eventually("every node queued", func() bool { return f.c.queue.Len() == 3 })
	if got := queued(f.c); !slices.Equal(got, []string{"node-1", "node-2", "node-3"}) {
		t.Errorf("queued %v after the initial listing, want every node", got)
	}
	lease := identityLease("replica-b", "node-2", f0.Add(50*time.Second))
	leases := f.kube.CoordinationV1().Leases(lease.Namespace)
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("replica-b seen on node-2", func() bool { e, _ := f.c.peers.replicas.On("node-2", f.clock.Now()); return e != "" })
	if err := leases.Delete(ctx, lease.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("replica-b forgotten", func() bool { e, _ := f.c.peers.replicas.On("node-2", f.clock.Now()); return e == "" })
}
