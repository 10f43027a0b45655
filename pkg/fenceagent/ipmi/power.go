package ipmi

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
	"github.com/kubefence/kubefence/pkg/plugin"
)

// closeTimeout bounds Close, which runs even after the call's context has ended.
const closeTimeout = 5 * time.Second

// session is one call's connection to one BMC and the evidence it gathers.
type session struct {
	agentkit.Evidence
	p      params
	client PowerClient
	// provider is the protocol in use (or being tried) and port its port.
	provider string
	port     int
	// probed means state was read when the provider was chosen and nothing has been
	// sent since, so the first ensure need not read it again.
	probed bool
	// state is the last power state read from the BMC, unknown until one is read.
	state plugin.PowerState
}

// open parses the request and tries its providers in order until one opens and reads
// the power state. Failures are typed plugin errors; the session comes back even then,
// with the evidence of every provider tried, unless the request itself is bad.
func (a *Agent) open(ctx context.Context, req plugin.Request) (*session, error) {
	p, err := parseRequest(req)
	if err != nil {
		return nil, err
	}
	s := &session{Evidence: agentkit.NewEvidence(p.secrets()...), p: p, state: plugin.StateUnknown}
	var failures []string
	var kinds []plugin.ErrorKind
	for _, provider := range p.providers {
		err := s.try(ctx, a.clients[provider], provider, req.Node)
		if err == nil {
			// The device proves it is the node's before anything is sent; a mismatch is
			// the same through every provider, so none other is tried.
			if err := s.checkIdentity(ctx, req.ExpectIdentity); err != nil {
				s.close(ctx)
				return s, err
			}
			return s, nil
		}
		if len(p.providers) == 1 {
			return s, err
		}
		s.Note("provider %s failed (%s): %s", provider, plugin.KindOf(err), agentkit.Message(err))
		failures = append(failures, fmt.Sprintf("%s (%s) %s: %s", provider, s.bmc(), plugin.KindOf(err), agentkit.Message(err)))
		kinds = append(kinds, plugin.KindOf(err))
	}
	return s, plugin.Errorf(combinedKind(kinds), "every provider failed, tried %s: %s",
		strings.Join(p.providers, ", "), strings.Join(failures, "; "))
}

// try opens one provider and reads the power state through it; on failure it closes
// what it opened and leaves the session without a client.
func (s *session) try(ctx context.Context, newClient ClientFunc, provider, node string) error {
	s.provider, s.port = provider, s.p.port
	if provider == ProviderRedfish {
		s.port = s.p.redfishPort
	}
	if newClient == nil {
		return plugin.Errorf(plugin.KindUnsupported, "provider %s: no client", provider)
	}
	client, err := newClient(Conn{
		Host: s.p.host, Port: s.port, CipherSuite: s.p.cipherSuite, Privilege: s.p.privilege,
		Username: s.p.username, Password: s.p.password, Timeout: s.p.timeout,
		CABundle: s.p.caBundle, Insecure: s.p.insecure, SystemName: s.p.systemName,
	})
	if err != nil {
		return s.classify(err, "connect to "+s.bmc())
	}
	if err := client.Open(ctx); err != nil {
		s.client = client
		s.close(ctx)
		s.client = nil
		return s.classify(err, "open "+s.bmc())
	}
	s.client = client
	s.Note("%s node %q via %s (%s), %s", s.bmc(), node, providerClients[provider], provider, s.transport())
	if _, err := s.readAndNote(ctx); err != nil {
		s.close(ctx)
		s.client = nil
		return err
	}
	s.probed = true
	return nil
}

// transport says how the connection is protected, for the evidence.
func (s *session) transport() string {
	switch {
	case s.provider == ProviderIPMI:
		return "cipher suite " + s.p.cipherSuite
	case s.p.insecure:
		return "tls NOT verified (insecure=true)"
	case s.p.caBundle != "":
		return "tls verified against caBundle"
	default:
		return "tls verified against the system roots"
	}
}

func (s *session) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	// A failed close cannot change what was read from the BMC; it is evidence only.
	if err := s.client.Close(ctx); err != nil {
		s.Note("close: %s", oneLine(err.Error()))
	}
}

func (s *session) bmc() string { return fmt.Sprintf("bmc %s:%d", s.p.host, s.port) }

func (s *session) classify(err error, what string) error { return classify(err, what, s.provider, s.p) }

// Ensure brings the chassis to want and verifies it by reading it back.
func (s *session) Ensure(ctx context.Context, want plugin.PowerState) error {
	got := s.state
	if !s.probed {
		var err error
		if got, err = s.readAndNote(ctx); err != nil {
			return err
		}
	}
	s.probed = false
	if got == want {
		s.Note("already %s, nothing sent", want)
		return nil
	}
	if err := s.set(ctx, want); err != nil {
		return err
	}
	return s.verify(ctx, want)
}

// read asks the BMC for its power state.
func (s *session) read(ctx context.Context) (plugin.PowerState, string, error) {
	raw, err := s.client.GetPowerState(ctx)
	if err != nil {
		return plugin.StateUnknown, raw, s.classify(err, "read power state of "+s.bmc())
	}
	st := parseState(raw)
	if s.provider == ProviderRedfish {
		st = parseRedfishState(raw)
	}
	s.state = st
	return st, raw, nil
}

// readAndNote reads the state once and records it in the evidence.
func (s *session) readAndNote(ctx context.Context) (plugin.PowerState, error) {
	st, raw, err := s.read(ctx)
	if err != nil {
		return st, err
	}
	if st == plugin.StateUnknown {
		s.Note("read power state %q, neither on nor off", truncate(s.Scrub(strings.TrimSpace(raw)), 120))
	} else {
		s.Note("read %s", st)
	}
	return st, nil
}

// set sends one power command.
func (s *session) set(ctx context.Context, want plugin.PowerState) error {
	ok, err := s.client.SetPowerState(ctx, string(want))
	if err != nil {
		return s.classify(err, fmt.Sprintf("power %s %s", want, s.bmc()))
	}
	if !ok {
		return plugin.Errorf(plugin.KindRetryable, "power %s %s: command not acknowledged", want, s.bmc())
	}
	s.Note("sent power %s, acknowledged", want)
	return nil
}

// verify polls the power state until it reads want. Running out of time is a
// failure that reports the last state read, never a success: an acknowledged
// command proves nothing about the chassis.
func (s *session) verify(ctx context.Context, want plugin.PowerState) error {
	polled, err := agentkit.PollUntil(ctx, s.p.verifyTimeout, s.p.pollInterval, func(ctx context.Context, _ *agentkit.Attempt) (bool, error) {
		st, _, err := s.read(ctx)
		return st == want, agentkit.Again(err)
	})
	if err == nil {
		s.Note("read %s, verified after %d read(s) in %s", want, polled.Reads, polled.Waited)
		return nil
	}
	if polled.Last != nil {
		s.Note("power %s not verified after %d read(s) in %s; last read failed", want, polled.Reads, polled.Waited)
		return plugin.Errorf(plugin.KindOf(polled.Last), "power %s %s not verified within %s: last read of the state failed: %s",
			want, s.bmc(), polled.Waited, agentkit.Message(polled.Last))
	}
	s.Note("power %s not verified after %d read(s) in %s; last read %s", want, polled.Reads, polled.Waited, s.state)
	// The bmc took the command and reads back another state: NotVerified. A state it
	// cannot name says nothing of the kind.
	kind := plugin.KindRetryable
	if s.state == plugin.StateOn || s.state == plugin.StateOff {
		kind = plugin.KindNotVerified
	}
	return plugin.Errorf(kind, "power %s %s not verified within %s: after %d read(s) the bmc still reports %s",
		want, s.bmc(), polled.Waited, polled.Reads, s.state)
}

// result is what the call observed: the last state read and the evidence. A nil
// session (a request refused before any BMC was contacted) observed nothing.
func (s *session) result() plugin.Result {
	if s == nil {
		return agentkit.Unknown()
	}
	return s.Result(s.state)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
