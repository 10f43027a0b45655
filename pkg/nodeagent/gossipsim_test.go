package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// The gossip simulation: N node agents' peers (StartPeers' memberlist, configuration and
// delegates) in one process on simNet, joining each other as the agents' read rounds do
// (joinRounds). It measures how long until every member holds all N alive, the bytes a
// member sends until then and per second after, the heap and stacks per member, and how
// long after one member is killed (no goodbye) until every other has declared it dead.
// docs/benchmarks.md has the figures and what they leave out.

// simProbeInterval is the agents' default: --isolation (10s) / 20.
const simProbeInterval = 500 * time.Millisecond

// simOptions are one run's settings.
type simOptions struct {
	members int
	// slow multiplies every memberlist period, for a process that cannot run N members'
	// work in real time; the figures are given back in the agents' real time (simFigures).
	slow int
	// window is how long the sent bytes are counted, in the agents' real time.
	window time.Duration
	// joiners is how many members join at once, as agents starting together do.
	joiners int
	// progress, when set, is told how a long run goes.
	progress io.Writer
	// joinLimit is how long the members may take to hold each other, in wall time.
	joinLimit time.Duration
	// heapLimit stops the run when the heap passes it, 0 for none.
	heapLimit uint64
}

// simFigures are one run's results, in the agents' real time (measured / slow) and
// bytes per second (measured × slow).
type simFigures struct {
	members, slow int
	// joined: every member held every other within the limit; otherwise heldAll held
	// them all and the fewest any held was heldLeast.
	joined             bool
	stopped            string
	heldAll            int
	heldLeast          int64
	join, detect, wall time.Duration
	// sentPerMember is in bytes per second from the moment all held all, while the
	// join's broadcasts still go round.
	sentPerMember       float64
	joinSentPerMember   float64 // bytes, until all held all
	heapPerMember       float64
	stackPerMember      float64
	goroutinesPerMember float64
	falseDead           int64
}

// memberView counts the members one member holds (alive or suspect) from memberlist's
// events, and the nodes it declared dead or gone.
type memberView struct {
	held, leaves atomic.Int64
}

func (v *memberView) NotifyJoin(*memberlist.Node)   { v.held.Add(1) }
func (v *memberView) NotifyLeave(*memberlist.Node)  { v.held.Add(-1); v.leaves.Add(1) }
func (v *memberView) NotifyUpdate(*memberlist.Node) {}

// gossipSim is N members on one simNet.
type gossipSim struct {
	opts    simOptions
	net     *simNet
	names   []string
	trans   []*simTransport
	peers   []*Peers
	views   []*memberView
	baseMem runtime.MemStats
}

// slowDown multiplies memberlist's periods by k: each probe, gossip and push-pull round
// happens k times less often and waits k times longer, the same protocol slowed down.
func slowDown(mc *memberlist.Config, k int) {
	d := time.Duration(k)
	mc.ProbeInterval *= d
	mc.ProbeTimeout *= d
	mc.GossipInterval *= d
	mc.GossipToTheDeadTime *= d
	mc.PushPullInterval *= d
	mc.TCPTimeout *= d
	mc.DeadNodeReclaimTime *= d
}

func startGossipSim(tb testing.TB, opts simOptions) *gossipSim {
	tb.Helper()
	s := &gossipSim{opts: opts, net: newSimNet(), views: make([]*memberView, opts.members)}
	for i := range opts.members {
		s.names = append(s.names, fmt.Sprintf("node-%05d", i))
		s.views[i] = &memberView{}
	}
	s.trans = s.net.transports(s.names)
	tb.Cleanup(s.stop)
	readMem(&s.baseMem)
	key := []byte("0123456789abcdef")
	known := func() ([]Entry, bool) { return nil, true }
	for i, name := range s.names {
		p, err := startPeers(PeerConfig{Node: name, Key: key, ProbeInterval: simProbeInterval}, known, clock.RealClock{},
			func(mc *memberlist.Config) {
				mc.Transport = s.trans[i]
				mc.Events = s.views[i]
				slowDown(mc, opts.slow)
			})
		if err != nil {
			tb.Fatalf("member %s: %v", name, err)
		}
		s.peers = append(s.peers, p)
	}
	return s
}

// stop crashes every member still up, then the network.
func (s *gossipSim) stop() {
	for _, p := range s.peers {
		p.Crash()
	}
	s.net.stop()
}

// simReadEvery is the agents' default read interval (--read-interval): each read round,
// an agent joins a few of the agents whose reports it found and it does not hold.
const simReadEvery = 2 * time.Second

// joinRounds are the agents' join rounds (Agent.join) until stop: at once and then every
// read interval, each member that does not hold all joins joinsPerRound of those it does
// not hold, opts.joiners members at a time. A member that holds all skips its round, as an
// agent whose reports name no stranger does.
func (s *gossipSim) joinRounds(stop <-chan struct{}) {
	addrs := make(map[string]string, len(s.names))
	for i, name := range s.names {
		addrs[name] = s.peers[i].Addr()
	}
	tick := time.NewTicker(simReadEvery * time.Duration(s.opts.slow))
	defer tick.Stop()
	for {
		s.joinRound(addrs, stop)
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// joinRound is one round of joinRounds; a round stopped part-way waits only for the joins
// under way.
func (s *gossipSim) joinRound(addrs map[string]string, stop <-chan struct{}) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range s.opts.joiners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := s.peers[i]
				known := p.memberNames()
				strangers := map[string]string{}
				for name, addr := range addrs {
					if !known[name] {
						strangers[name] = addr
					}
				}
				p.join(known, strangers)
			}
		}()
	}
feed:
	for i, v := range s.views {
		if v.held.Load() < int64(len(s.names)) {
			select {
			case work <- i:
			case <-stop:
				break feed
			}
		}
	}
	close(work)
	wg.Wait()
}

// until polls every member's view until each holds want members (skipping the member
// skip), for at most limit or until the heap passes opts.heapLimit; it says how many held
// want and the fewest any held.
func (s *gossipSim) until(want int64, skip int, limit time.Duration) (int, int64, error) {
	start, told := time.Now(), time.Now()
	expected := len(s.views)
	if skip >= 0 {
		expected--
	}
	var all int
	var least int64
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, limit, true, func(context.Context) (bool, error) {
		all, least = 0, want
		for i, v := range s.views {
			if held := v.held.Load(); i != skip {
				least = min(least, held)
				if held == want {
					all++
				}
			}
		}
		if time.Since(told) < 10*time.Second {
			return all == expected, nil
		}
		told = time.Now()
		var mem runtime.MemStats
		runtime.ReadMemStats(&mem)
		if s.opts.progress != nil {
			fmt.Fprintf(s.opts.progress, "%s: %d members hold %d, the fewest held %d; heap %.1f GiB\n",
				time.Since(start).Round(time.Second), all, want, least, float64(mem.HeapInuse)/(1<<30))
		}
		if s.opts.heapLimit > 0 && mem.HeapInuse > s.opts.heapLimit {
			return false, fmt.Errorf("heap %.1f GiB, over the limit of %.1f GiB", float64(mem.HeapInuse)/(1<<30), float64(s.opts.heapLimit)/(1<<30))
		}
		return all == expected, nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("not within %s", limit)
	}
	return all, least, err
}

// sent is the bytes every member sent so far.
func (s *gossipSim) sent() int64 {
	var n int64
	for _, t := range s.trans {
		n += t.sent.Load()
	}
	return n
}

// leaves is how many times members declared a node dead or gone.
func (s *gossipSim) leaves() int64 {
	var n int64
	for _, v := range s.views {
		n += v.leaves.Load()
	}
	return n
}

// readMem reads the memory in use after a collection.
func readMem(m *runtime.MemStats) {
	runtime.GC()
	runtime.ReadMemStats(m)
}

// runGossipSim joins opts.members members, counts their memory and traffic, kills one
// and waits until the others declared it dead. A run whose members do not all hold each
// other within opts.joinLimit (wall time) stops there, its figures saying how far it got.
func runGossipSim(tb testing.TB, opts simOptions) simFigures {
	tb.Helper()
	s := startGossipSim(tb, opts)
	f := simFigures{members: len(s.names), slow: opts.slow}
	start, stop := time.Now(), make(chan struct{})
	rounds := make(chan struct{})
	go func() {
		defer close(rounds)
		s.joinRounds(stop)
	}()
	var err error
	f.heldAll, f.heldLeast, err = s.until(int64(f.members), -1, opts.joinLimit)
	f.joined = err == nil
	if err != nil {
		f.stopped = err.Error()
	}
	close(stop)
	<-rounds
	f.wall = time.Since(start)
	f.join = f.wall / time.Duration(opts.slow)
	f.joinSentPerMember = f.perMember(float64(s.sent()))
	s.measureMemory(&f)
	if !f.joined {
		return f
	}
	s.measureTraffic(&f)
	s.killOne(tb, &f)
	f.wall = time.Since(start)
	return f
}

// measureMemory is the heap and stacks per member, and their goroutines.
func (s *gossipSim) measureMemory(f *simFigures) {
	var mem runtime.MemStats
	readMem(&mem)
	f.heapPerMember = f.perMember(float64(mem.HeapInuse) - float64(s.baseMem.HeapInuse))
	f.stackPerMember = f.perMember(float64(mem.StackInuse) - float64(s.baseMem.StackInuse))
	f.goroutinesPerMember = f.perMember(float64(runtime.NumGoroutine()))
}

// measureTraffic counts what the members send for opts.window of the agents' time.
func (s *gossipSim) measureTraffic(f *simFigures) {
	from, at := s.sent(), time.Now()
	<-time.After(s.opts.window * time.Duration(s.opts.slow))
	agentTime := time.Since(at) / time.Duration(s.opts.slow)
	f.sentPerMember = f.perMember(float64(s.sent()-from) / agentTime.Seconds())
}

// killOne crashes a member (no goodbye) and waits until every other declared it dead.
func (s *gossipSim) killOne(tb testing.TB, f *simFigures) {
	victim := f.members / 2
	start := time.Now()
	s.peers[victim].Crash()
	if _, _, err := s.until(int64(f.members-1), victim, time.Duration(s.opts.slow)*5*time.Minute); err != nil {
		tb.Fatalf("%d members: not every member declared %s dead: %v", f.members, s.names[victim], err)
	}
	f.detect = time.Since(start) / time.Duration(s.opts.slow)
	// Every other member declares the victim dead once; any other death was a mistake.
	f.falseDead = s.leaves() - int64(f.members-1)
}

func (f simFigures) perMember(v float64) float64 { return v / float64(f.members) }

// TestGossipSim runs the simulation small, at the agents' real timings: every member
// holds all of them, each declares a killed member dead, and the counts add up.
func TestGossipSim(t *testing.T) {
	f := runGossipSim(t, simOptions{members: 50, slow: 1, window: time.Second, joiners: 4, joinLimit: time.Minute})
	if !f.joined {
		t.Fatalf("the members did not hold each other: %s", f)
	}
	if f.sentPerMember <= 0 || f.joinSentPerMember <= 0 {
		t.Errorf("no bytes counted: %s", f)
	}
	if f.falseDead < 0 {
		t.Errorf("fewer deaths declared than members left to declare one: %s", f)
	}
	t.Log(f)
}

// BenchmarkGossipSim runs the simulation at 1,000 and 5,000 members (make bench-gossip);
// its figures are in the agents' real time. The periods are slowed down (simOptions.slow)
// so that two cores can run every member's work in time: at the agents' real timings
// 1,000 members needed about six cores here, and their probes timed out for want of CPU.
func BenchmarkGossipSim(b *testing.B) {
	// 5,000 members hold 25 million of each other's entries: the collector must run before
	// the heap doubles, and the run stops well short of the machine's memory.
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(14 << 30))
	for _, bc := range []struct {
		members, slow int
		limit         time.Duration
	}{{1000, 10, 20 * time.Minute}, {5000, 25, 30 * time.Minute}} {
		b.Run(fmt.Sprintf("members=%d", bc.members), func(b *testing.B) {
			opts := simOptions{members: bc.members, slow: bc.slow, window: 10 * time.Second, joiners: 16, progress: os.Stderr,
				joinLimit: bc.limit, heapLimit: 12 << 30}
			var f simFigures
			for range b.N {
				f = runGossipSim(b, opts)
			}
			b.ReportMetric(f.join.Seconds(), "join-s")
			b.ReportMetric(float64(f.heldAll), "members-holding-all")
			b.ReportMetric(f.detect.Seconds(), "detect-s")
			b.ReportMetric(f.sentPerMember, "sent-B/s/member")
			b.ReportMetric(f.joinSentPerMember, "join-sent-B/member")
			b.ReportMetric(f.heapPerMember, "heap-B/member")
			b.ReportMetric(f.stackPerMember, "stack-B/member")
			b.ReportMetric(float64(f.falseDead), "false-dead")
			b.Log(f)
		})
	}
}

func (f simFigures) String() string {
	head := fmt.Sprintf("%d members, memberlist's periods ×%d (%s wall): ", f.members, f.slow, f.wall.Round(time.Second))
	mem := fmt.Sprintf("%.0f kB heap, %.0f kB stack, %.0f goroutines per member",
		f.heapPerMember/1e3, f.stackPerMember/1e3, f.goroutinesPerMember)
	if !f.joined {
		return head + fmt.Sprintf("stopped after %.1fs (%s): %d members held all, the fewest held %d; %.0f kB sent per member; %s",
			f.join.Seconds(), f.stopped, f.heldAll, f.heldLeast, f.joinSentPerMember/1e3, mem)
	}
	return head + fmt.Sprintf("all held all in %.1fs (%.0f kB sent per member), then %.0f B/s per member; %s; "+
		"a killed member declared dead by all in %.1fs; %d other deaths declared",
		f.join.Seconds(), f.joinSentPerMember/1e3, f.sentPerMember, mem, f.detect.Seconds(), f.falseDead)
}
