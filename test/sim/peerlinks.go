package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kubefence/kubefence/pkg/nodeagent"
)

// peerSwitch carries the node agents' peer traffic in the simulation, so that a
// partition cuts a node from its peers as well as from the API server. Every agent binds
// its own port and advertises its relay's; a relay forwards UDP (memberlist's probes and
// acks, the ones that count) from a socket per sender, so that answers find their way
// back, and drops every datagram to or from a cut node. TCP (memberlist's state
// exchange) goes through an apiLink, cut with the node; its answers never count.
type peerSwitch struct {
	mu  sync.Mutex
	cut map[string]bool
	// fromSeats are the nodes cut off from the controller's seats (members named
	// nodeagent.ObserverPrefix + replica) only.
	fromSeats map[string]bool
	byPort    map[int]string // an agent's bound UDP port → its node
	relays    []*peerRelay
}

func newPeerSwitch() *peerSwitch {
	return &peerSwitch{cut: map[string]bool{}, fromSeats: map[string]bool{}, byPort: map[int]string{}}
}

// CutFromSeats drops every datagram between node and the controller's seats from now on,
// and every TCP connection to node (memberlist's TCP pings would otherwise go around the
// cut; its state exchange with the other agents waits for the next round).
func (s *peerSwitch) CutFromSeats(node string) { s.cutIn(s.fromSeats, node) }

// Cut drops every datagram to or from node from now on, and its TCP connections.
func (s *peerSwitch) Cut(node string) { s.cutIn(s.cut, node) }

// cutIn marks node in set, and cuts the TCP of its relays.
func (s *peerSwitch) cutIn(set map[string]bool, node string) {
	s.mu.Lock()
	set[node] = true
	relays := slices.Clone(s.relays)
	s.mu.Unlock()
	for _, r := range relays {
		if r.node == node {
			r.tcp.Cut()
		}
	}
}

// apart says whether datagrams between a and b may not pass.
func (s *peerSwitch) apart(a, b string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	seat := func(n string) bool { return strings.HasPrefix(n, nodeagent.ObserverPrefix) }
	return s.cut[a] || s.cut[b] || (seat(a) && s.fromSeats[b]) || (seat(b) && s.fromSeats[a])
}

func (s *peerSwitch) nodeOf(addr *net.UDPAddr) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byPort[addr.Port]
}

// Close stops every relay.
func (s *peerSwitch) Close() {
	for _, r := range s.relays {
		r.close()
	}
}

// relay starts node's relay in front of its agent's port, and returns the relay's address.
func (s *peerSwitch) relay(node string, agentPort int) (string, error) {
	udp, tcp, err := listenPair(net.JoinHostPort("127.0.0.1", strconv.Itoa(agentPort)))
	if err != nil {
		return "", fmt.Errorf("peer relay for %s: %w", node, err)
	}
	r := &peerRelay{s: s, node: node, agent: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: agentPort},
		udp: udp, tcp: tcp, nat: map[string]*net.UDPConn{}}
	s.mu.Lock()
	s.byPort[agentPort] = node
	s.relays = append(s.relays, r)
	s.mu.Unlock()
	go r.serveUDP()
	return udp.LocalAddr().String(), nil
}

type peerRelay struct {
	s     *peerSwitch
	node  string
	agent *net.UDPAddr
	udp   *net.UDPConn
	tcp   *apiLink // refuses every connection once the node is cut

	mu  sync.Mutex
	nat map[string]*net.UDPConn // sender → the socket that talks to the agent for it
}

// blocked says whether a datagram between this node and from may not pass.
func (r *peerRelay) blocked(from *net.UDPAddr) bool {
	return r.s.apart(r.node, r.s.nodeOf(from))
}

func (r *peerRelay) serveUDP() {
	buf := make([]byte, 65536)
	for {
		n, from, err := r.udp.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if r.blocked(from) {
			continue
		}
		out, err := r.natFor(from)
		if err != nil {
			continue
		}
		_, _ = out.Write(buf[:n])
	}
}

// natFor is the socket that carries from's datagrams to the agent, and the agent's
// answers back to from.
func (r *peerRelay) natFor(from *net.UDPAddr) (*net.UDPConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.nat[from.String()]; ok {
		return c, nil
	}
	c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, r.agent)
	if err != nil {
		return nil, err
	}
	r.nat[from.String()] = c
	go func() {
		buf := make([]byte, 65536)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if r.blocked(from) {
				continue
			}
			_, _ = r.udp.WriteToUDP(buf[:n], from)
		}
	}()
	return c, nil
}

func (r *peerRelay) close() {
	_ = r.udp.Close()
	r.tcp.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.nat {
		_ = c.Close()
	}
}

// listenPair binds a UDP socket and a TCP relay to target on one loopback port, as
// memberlist's TCP shares its UDP port. A port free for UDP may be taken for TCP by
// another test's process, so a clash picks another port; a clash every time is an error.
func listenPair(target string) (*net.UDPConn, *apiLink, error) {
	var last error
	for range 20 {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return nil, nil, err
		}
		port := udp.LocalAddr().(*net.UDPAddr).Port
		tcp, err := startLink(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), target)
		if err == nil {
			return udp, tcp, nil
		}
		_ = udp.Close()
		last = err
	}
	return nil, nil, errors.Join(errors.New("no loopback port free for both UDP and TCP after 20 tries"), last)
}

// freePeerPort finds a loopback port free for both UDP and TCP, for an agent to bind its
// memberlist to. The port comes from below the kernel's ephemeral range: the sockets close
// before the agent starts, and a port from that range was taken in between by one of the
// hundreds of connections a run opens (an agent exited with "bind: address already in
// use"). Below the range only listeners that name their port take one.
func freePeerPort() (int, error) {
	peerPorts.Lock()
	defer peerPorts.Unlock()
	if peerPorts.low == 0 {
		low, err := ephemeralLow()
		if err != nil {
			// No room below the range: a port from it, which is only likely to stay free.
			udp, tcp, err := listenPair("127.0.0.1:1")
			if err != nil {
				return 0, err
			}
			defer tcp.Close()
			defer udp.Close()
			return udp.LocalAddr().(*net.UDPAddr).Port, nil
		}
		peerPorts.low, peerPorts.high = low/2, low-1000
		peerPorts.next = peerPorts.low + rand.IntN(peerPorts.high-peerPorts.low)
	}
	for range peerPorts.high - peerPorts.low {
		port := peerPorts.next
		if peerPorts.next++; peerPorts.next >= peerPorts.high {
			peerPorts.next = peerPorts.low
		}
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			continue
		}
		tcp, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		_ = udp.Close()
		if err != nil {
			continue
		}
		_ = tcp.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no loopback port free for both UDP and TCP in %d-%d", peerPorts.low, peerPorts.high)
}

// peerPorts is where freePeerPort goes on: each port once before any comes again.
var peerPorts struct {
	sync.Mutex
	low, high, next int
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() (int, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, fmt.Errorf("ip_local_port_range %q: want two ports", b)
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low < 4000 {
		return 0, fmt.Errorf("ip_local_port_range %q: the ephemeral range must start at 4000 or above, to leave ports below it", b)
	}
	return low, nil
}
