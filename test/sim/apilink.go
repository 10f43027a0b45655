package sim

import (
	"io"
	"net"
	"sync"
)

// apiLink is a TCP relay that Cut breaks for good: a node's path to the API server, and
// the TCP side of its peer relay.
type apiLink struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

// startLink relays connections made to listen (host:port, port 0 for any) to target.
func startLink(listen, target string) (*apiLink, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	l := &apiLink{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go l.accept()
	return l, nil
}

func (l *apiLink) Addr() string { return l.ln.Addr().String() }

func (l *apiLink) accept() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		if !l.track(in) {
			_ = in.Close()
			continue
		}
		out, err := net.Dial("tcp", l.target)
		if err != nil || !l.track(out) {
			_ = in.Close()
			if out != nil {
				_ = out.Close()
			}
			continue
		}
		go l.relay(in, out)
		go l.relay(out, in)
	}
}

func (l *apiLink) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		return false
	}
	l.conns[c] = true
	return true
}

// relay copies until either end closes (a cut closes both), then closes both.
func (l *apiLink) relay(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	l.mu.Lock()
	delete(l.conns, dst)
	delete(l.conns, src)
	l.mu.Unlock()
}

// Cut drops every connection and refuses new ones.
func (l *apiLink) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for c := range l.conns {
		_ = c.Close()
	}
	l.conns = map[net.Conn]bool{}
}

// Close cuts the link and stops listening.
func (l *apiLink) Close() {
	l.Cut()
	_ = l.ln.Close()
}
