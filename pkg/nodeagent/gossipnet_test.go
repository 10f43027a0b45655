package nodeagent

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// packetQueue is how many packets a member's transport holds before it drops one, as a
// full UDP socket buffer does: memberlist's own transport asks for 2 MB, about 1,500
// packets of 1,400 bytes.
const packetQueue = 1024

// simNet is memberlist's in-memory network (MockNetwork) with what the gossip simulation
// needs from a real one. MockTransport hands a packet over an unbuffered channel: its
// sender waits until the receiver reads it, so two members acking each other's probes at
// once wait on each other for ever, and a member that was shut down (MockTransport's
// Shutdown does nothing) holds every sender to it. Each member's end here takes its
// packets and streams off the mock at once and queues them; a packet that finds the
// queue full is lost, and once the member is down its packets are dropped and its
// streams closed, as a killed agent's port refuses them. Every byte a member sends, in a
// packet or on a stream, is counted.
type simNet struct {
	mock memberlist.MockNetwork
	done chan struct{}
}

// simTransport is one member's end of simNet.
type simTransport struct {
	mock    *memberlist.MockTransport
	packets chan *memberlist.Packet
	streams chan net.Conn
	// sent is the bytes the member sent.
	sent atomic.Int64
	down atomic.Bool
}

var _ memberlist.NodeAwareTransport = (*simTransport)(nil)

func newSimNet() *simNet { return &simNet{done: make(chan struct{})} }

// transports are the members' ends, one per name. MockNetwork's address book is a plain
// map: all of them are made before any member starts.
func (n *simNet) transports(names []string) []*simTransport {
	out := make([]*simTransport, len(names))
	for i, name := range names {
		t := &simTransport{mock: n.mock.NewTransport(name), packets: make(chan *memberlist.Packet, packetQueue),
			streams: make(chan net.Conn, 16)}
		go t.run(n.done)
		out[i] = t
	}
	return out
}

// stop stops every member's queueing.
func (n *simNet) stop() { close(n.done) }

// run queues what reaches the member.
func (t *simTransport) run(done <-chan struct{}) {
	for {
		select {
		case p := <-t.mock.PacketCh():
			if t.down.Load() {
				continue
			}
			select {
			case t.packets <- p:
			default:
			}
		case c := <-t.mock.StreamCh():
			t.accept(c)
		case <-done:
			return
		}
	}
}

// accept queues a stream another member opened, whose replies count as this member's.
func (t *simTransport) accept(c net.Conn) {
	if t.down.Load() {
		_ = c.Close()
		return
	}
	select {
	case t.streams <- countingConn{Conn: c, sent: &t.sent}:
	default:
		_ = c.Close()
	}
}

func (t *simTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.mock.FinalAdvertiseAddr(ip, port)
}

func (t *simTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *simTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	t.sent.Add(int64(len(b)))
	return t.mock.WriteToAddress(b, a)
}

func (t *simTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *simTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *simTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	c, err := t.mock.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, sent: &t.sent}, nil
}

func (t *simTransport) StreamCh() <-chan net.Conn { return t.streams }

func (t *simTransport) IngestStream(c net.Conn) error {
	t.accept(c)
	return nil
}

// Shutdown takes the member off the network: memberlist calls it on Shutdown.
func (t *simTransport) Shutdown() error {
	t.down.Store(true)
	return nil
}

// countingConn counts what one member writes on a stream.
type countingConn struct {
	net.Conn
	sent *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.sent.Add(int64(n))
	return n, err
}
