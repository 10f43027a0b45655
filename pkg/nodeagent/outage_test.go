package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	fencingfake "github.com/kubefence/kubefence/pkg/generated/clientset/versioned/fake"
	"github.com/kubefence/kubefence/pkg/watchdog"
)

// TestOutageKeepsEveryNodeAliveAtABoundedCost: 25 agents in one process, each feeding an
// emulated watchdog (T 1s) and answering the others over loopback, with isolation 2s and
// a read every 500ms, and probes one per isolation, so that only questions (Ask) bring
// a majority, as in a large cluster. The API server then hangs for three times isolation:
// every read and every report write takes its whole timeout before it fails, as in an
// outage where the connection hangs. The fake clientsets the agents share serve one
// request at a time, so their read loops turn far slower still: the questions must not
// wait for the loop (asked from it, every watchdog here ran out). No watchdog may run
// out, and the questions each agent sends stay within what a majority needs, refreshed
// every half isolation, with a round to spare: (outage / (isolation/2) + 2) × (majority
// + margin − 1) = 120, where asking every member once a second would be 144.
func TestOutageKeepsEveryNodeAliveAtABoundedCost(t *testing.T) {
	const n = 25
	const isolation, readEvery = 2 * time.Second, 500 * time.Millisecond
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var names []string
	var nodes []runtime.Object
	for i := range n {
		names = append(names, fmt.Sprintf("n%02d", i))
		nodes = append(nodes, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: names[i]}})
	}
	var down atomic.Bool
	hang := func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			time.Sleep(readEvery) // the request's timeout, as a hung connection takes it
			return true, nil, errors.New("context deadline exceeded")
		}
		return false, nil, nil
	}
	kube := kubefake.NewClientset()
	kube.PrependReactor("*", "leases", hang)
	fencing := fencingfake.NewSimpleClientset()
	fencing.PrependReactor("list", "nodefences", hang)

	var expired atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	var agents []*Agent
	done := make(chan error, n)
	for _, name := range names {
		emu := &watchdog.Emulator{Path: filepath.Join(t.TempDir(), "wd.sock"), Expired: func() { expired.Add(1) }}
		if err := emu.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = emu.Close() })
		a := New(Config{Node: name, Namespace: ns, BootID: "boot-" + name,
			Clients:  Clients{Kube: kube, Fencing: fencing, Metadata: metadatafake.NewSimpleMetadataClient(scheme, nodes...)},
			Timing:   Timing{Isolation: isolation, ReadEvery: readEvery, ReportEvery: time.Minute},
			Watchdog: &watchdog.Socket{Path: emu.Path}, WatchdogTimeout: time.Second,
			Peers: &PeerConfig{Node: name, BindAddr: "127.0.0.1", Key: peerKey, ProbeInterval: isolation}})
		agents = append(agents, a)
		go func() { done <- a.Run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range n {
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	})
	pollFor(t, "every agent armed and a member of all 25", func() bool {
		for _, a := range agents {
			f, p := a.started()
			if f == nil || p == nil || !f.State().Armed || p.ml.NumMembers() != n {
				return false
			}
		}
		return true
	})
	// What the chart's KubefencePeersNotAnswering alert compares: every agent counts all
	// 25 alive, out of the 25 members its read listed.
	pollFor(t, "every agent's metrics to count 25 members, 25 alive", func() bool {
		for _, a := range agents {
			if m := gather(t, a); m["members"] != float64(n) || m["peers_alive"] != float64(n) {
				return false
			}
		}
		return true
	})
	questions := func() (q []uint64) {
		for _, a := range agents {
			_, p := a.started()
			q = append(q, p.questions.Load())
		}
		return q
	}
	before := questions()
	down.Store(true)
	outage := 3 * isolation
	began := time.Now()
	pollFor(t, "the outage to last three times isolation", func() bool { return time.Since(began) >= outage })
	after := questions()
	down.Store(false)

	if e := expired.Load(); e != 0 {
		t.Errorf("%d watchdogs ran out through the outage", e)
	}
	for _, a := range agents {
		if f, _ := a.started(); f.State().Stopped != "" {
			t.Errorf("%s stopped feeding: %s", a.cfg.Node, f.State().Stopped)
		}
	}
	want := n/2 + 1 + askMargin(n)
	bound := uint64((outage/(isolation/2) + 2)) * uint64(want-1)
	var total, most uint64
	for i := range agents {
		q := after[i] - before[i]
		total += q
		most = max(most, q)
		if q > bound {
			t.Errorf("%s asked %d questions through the outage, more than %d", names[i], q, bound)
		}
	}
	t.Logf("questions per agent through a %s outage: %.1f on average, %d at most (bound %d; asking all 24 once a second would be %d)",
		outage, float64(total)/n, most, bound, 24*int(outage/(2*readEvery)))
}
