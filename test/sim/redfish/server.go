package redfish

import (
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Options configure a Redfish service.
type Options struct {
	// Systems are the ComputerSystems served, in collection order. Empty means one
	// system "1", powered on.
	Systems []SystemOptions
	// User and Password are the only valid credentials; "admin"/"secret" when empty.
	User, Password string
	// TransitionDelay keeps a system PoweringOn or PoweringOff this long after a
	// request before its PowerState changes; zero changes it at once.
	TransitionDelay time.Duration
	// CA signs the serving certificate; nil generates a new CA for this server.
	CA *CA
}

// SystemOptions configure one ComputerSystem.
type SystemOptions struct {
	// ID is the system's Id and Name, the last segment of its URI. Required.
	ID string
	// PoweredOn is the initial power state.
	PoweredOn bool
	// IgnorePowerOff makes broken firmware: ForceOff and GracefulShutdown are
	// acknowledged (204) and logged as ActionIgnoredOff, and the power stays on.
	IgnorePowerOff bool
	// UUID is the system's UUID property (what its machine reports as systemUUID);
	// empty serves none.
	UUID string
}

// Server is a running Redfish service on 127.0.0.1.
type Server struct {
	opts Options
	ca   *CA
	srv  *httptest.Server
	host string
	port int
	now  func() time.Time

	mu       sync.Mutex
	systems  map[string]*system
	order    []string
	sessions map[string]string // session id -> token
	nextID   int
	requests int
}

// Start serves a Redfish service over TLS on a free port of 127.0.0.1. The caller
// stops it with Close.
func Start(opts Options) (*Server, error) {
	if opts.User == "" {
		opts.User = "admin"
	}
	if opts.Password == "" {
		opts.Password = "secret"
	}
	if len(opts.Systems) == 0 {
		opts.Systems = []SystemOptions{{ID: "1", PoweredOn: true}}
	}
	s := &Server{opts: opts, ca: opts.CA, now: time.Now,
		systems: map[string]*system{}, sessions: map[string]string{}}
	for i, so := range opts.Systems {
		if so.ID == "" || url.PathEscape(so.ID) != so.ID {
			return nil, fmt.Errorf("start redfish sim: Systems[%d].ID %q is empty or not URI-safe", i, so.ID)
		}
		if _, dup := s.systems[so.ID]; dup {
			return nil, fmt.Errorf("start redfish sim: Systems[%d].ID %q is a duplicate", i, so.ID)
		}
		s.systems[so.ID] = &system{id: so.ID, on: so.PoweredOn, ignorePowerOff: so.IgnorePowerOff, uuid: so.UUID}
		s.order = append(s.order, so.ID)
	}
	if s.ca == nil {
		ca, err := NewCA()
		if err != nil {
			return nil, fmt.Errorf("start redfish sim: %w", err)
		}
		s.ca = ca
	}
	cert, err := s.ca.serverCert()
	if err != nil {
		return nil, fmt.Errorf("start redfish sim: %w", err)
	}
	s.srv = httptest.NewUnstartedServer(s.routes())
	s.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	// Handshake failures of clients that refuse our certificate are expected in tests.
	s.srv.Config.ErrorLog = discardLog()
	s.srv.StartTLS()
	addr, ok := s.srv.Listener.Addr().(*net.TCPAddr)
	if !ok {
		s.srv.Close()
		return nil, errors.New("start redfish sim: listener is not TCP")
	}
	s.host, s.port = addr.IP.String(), addr.Port
	return s, nil
}

// Close stops the server and closes every connection.
func (s *Server) Close() { s.srv.Close() }

// Host is the address the server listens on, 127.0.0.1.
func (s *Server) Host() string { return s.host }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// Address is host:port, what a fence agent gets as its target.
func (s *Server) Address() string { return net.JoinHostPort(s.host, strconv.Itoa(s.port)) }

// URL is the base URL, https://127.0.0.1:PORT.
func (s *Server) URL() string { return s.srv.URL }

// User is the valid user name.
func (s *Server) User() string { return s.opts.User }

// Password is the valid password.
func (s *Server) Password() string { return s.opts.Password }

// CA is the authority that signed the serving certificate.
func (s *Server) CA() *CA { return s.ca }

// CAPEM is the CA certificate in PEM form: the bundle a client must trust.
func (s *Server) CAPEM() []byte { return s.ca.PEM() }

// SystemIDs lists the systems in collection order.
func (s *Server) SystemIDs() []string { return append([]string(nil), s.order...) }

// PoweredOn reports whether system id has power. A system PoweringOff still has it.
func (s *Server) PoweredOn(id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sys, err := s.system(id)
	if err != nil {
		return false, err
	}
	sys.settle(s.now())
	return sys.on, nil
}

// SetPower changes the power of system id by the sim's own hand, like a person at
// the power button, and logs it with SourceSim.
func (s *Server) SetPower(id string, on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sys, err := s.system(id)
	if err != nil {
		return err
	}
	sys.set(on, s.now())
	return nil
}

// Events returns the power log of system id, oldest first.
func (s *Server) Events(id string) ([]PowerEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sys, err := s.system(id)
	if err != nil {
		return nil, err
	}
	sys.settle(s.now())
	return append([]PowerEvent(nil), sys.events...), nil
}

// OpenSessions is how many sessions were created and not yet deleted, to check that
// clients log out.
func (s *Server) OpenSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Requests is how many HTTP requests the server has handled.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Power is system id as the simulated cluster sees it: a node's power source.
func (s *Server) Power(id string) *SystemPower { return &SystemPower{srv: s, id: id} }

// SystemPower is one system's power, with the PoweredOn method test/sim's Power wants.
type SystemPower struct {
	srv *Server
	id  string
}

// PoweredOn reports whether the system has power.
func (p *SystemPower) PoweredOn() (bool, error) { return p.srv.PoweredOn(p.id) }

// system returns system id; the caller holds s.mu.
func (s *Server) system(id string) (*system, error) {
	sys, ok := s.systems[id]
	if !ok {
		return nil, fmt.Errorf("redfish sim: no system %q", id)
	}
	return sys, nil
}

// newSession registers a session and returns its id and token; the caller holds s.mu.
func (s *Server) newSession() (string, string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("generate session token: %w", err)
	}
	s.nextID++
	id := strconv.Itoa(s.nextID)
	s.sessions[id] = hex.EncodeToString(b)
	return id, s.sessions[id], nil
}

// authorized checks an X-Auth-Token or basic credentials; the caller holds s.mu.
func (s *Server) authorized(r *http.Request) bool {
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		for _, t := range s.sessions {
			if subtle.ConstantTimeCompare([]byte(t), []byte(tok)) == 1 {
				return true
			}
		}
		return false
	}
	user, pass, ok := r.BasicAuth()
	return ok && s.validCredentials(user, pass)
}

func (s *Server) validCredentials(user, pass string) bool {
	u := subtle.ConstantTimeCompare([]byte(user), []byte(s.opts.User))
	p := subtle.ConstantTimeCompare([]byte(pass), []byte(s.opts.Password))
	return u&p == 1
}
