package ipmi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// closeTimeout bounds Close, which runs even after the call's context has ended.
const closeTimeout = 5 * time.Second

// session is one call's connection to one BMC and the evidence it gathers.
type session struct {
	p      params
	client PowerClient
	// state is the last power state read from the BMC, unknown until one is read.
	state    plugin.PowerState
	evidence []string
}

// open parses the request and opens a client. Failures are typed plugin errors.
func (a *Agent) open(ctx context.Context, req plugin.Request) (*session, error) {
	p, err := parseRequest(req)
	if err != nil {
		return nil, err
	}
	s := &session{p: p, state: plugin.StateUnknown}
	client, err := a.newClient(Conn{
		Host: p.host, Port: p.port, CipherSuite: p.cipherSuite,
		Username: p.username, Password: p.password, Timeout: p.timeout,
	})
	if err != nil {
		return nil, classify(err, "connect to "+s.bmc(), p)
	}
	if err := client.Open(ctx); err != nil {
		return nil, classify(err, "open "+s.bmc(), p)
	}
	s.client = client
	s.note("%s node %q via %s, cipher suite %s", s.bmc(), req.Node, providerName, p.cipherSuite)
	return s, nil
}

func (s *session) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	// A failed close cannot change what was read from the BMC; it is evidence only.
	if err := s.client.Close(ctx); err != nil {
		s.note("close: %s", scrub(err.Error(), s.p))
	}
}

func (s *session) bmc() string { return fmt.Sprintf("bmc %s:%d", s.p.host, s.p.port) }

// ensure brings the chassis to want and verifies it by reading it back.
func (s *session) ensure(ctx context.Context, want plugin.PowerState) error {
	got, err := s.readAndNote(ctx)
	if err != nil {
		return err
	}
	if got == want {
		s.note("already %s, nothing sent", want)
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
		return plugin.StateUnknown, raw, classify(err, "read power state of "+s.bmc(), s.p)
	}
	st := parseState(raw)
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
		s.note("read unparseable power state %q", truncate(scrub(strings.TrimSpace(raw), s.p), 120))
	} else {
		s.note("read %s", st)
	}
	return st, nil
}

// set sends one power command.
func (s *session) set(ctx context.Context, want plugin.PowerState) error {
	ok, err := s.client.SetPowerState(ctx, string(want))
	if err != nil {
		return classify(err, fmt.Sprintf("power %s %s", want, s.bmc()), s.p)
	}
	if !ok {
		return plugin.Errorf(plugin.KindRetryable, "power %s %s: command not acknowledged", want, s.bmc())
	}
	s.note("sent power %s, acknowledged", want)
	return nil
}

// verify polls the power state until it reads want. Running out of time is a
// failure that reports the last state read, never a success: an acknowledged
// command proves nothing about the chassis.
func (s *session) verify(ctx context.Context, want plugin.PowerState) error {
	start := time.Now()
	vctx, cancel := context.WithTimeout(ctx, s.p.verifyTimeout)
	defer cancel()
	tick := time.NewTicker(s.p.pollInterval)
	defer tick.Stop()
	reads := 0
	var lastErr error
	for {
		st, _, err := s.read(vctx)
		reads++
		if err == nil && st == want {
			s.note("read %s, verified after %d read(s) in %s", st, reads, time.Since(start).Round(time.Millisecond))
			return nil
		}
		if err != nil && vctx.Err() != nil {
			// Our own deadline cut this read short; it says nothing about the BMC.
			return s.notVerified(want, reads-1, time.Since(start), lastErr)
		}
		lastErr = err
		select {
		case <-vctx.Done():
			return s.notVerified(want, reads, time.Since(start), lastErr)
		case <-tick.C:
		}
	}
}

func (s *session) notVerified(want plugin.PowerState, reads int, waited time.Duration, lastErr error) error {
	waited = waited.Round(time.Millisecond)
	if lastErr != nil {
		s.note("power %s not verified after %d read(s) in %s; last read failed", want, reads, waited)
		return plugin.Errorf(plugin.KindOf(lastErr), "power %s %s not verified within %s: last read of the state failed: %s",
			want, s.bmc(), waited, messageOf(lastErr))
	}
	s.note("power %s not verified after %d read(s) in %s; last read %s", want, reads, waited, s.state)
	return plugin.Errorf(plugin.KindRetryable, "power %s %s not verified within %s: after %d read(s) the bmc still reports %s",
		want, s.bmc(), waited, reads, s.state)
}

// result is what the call observed: the last state read and the evidence.
func (s *session) result() plugin.Result {
	return plugin.Result{State: s.state, Evidence: strings.Join(s.evidence, "; ")}
}

// note adds a timestamped step to the evidence. Callers pass no secrets; scrub
// guards against ones echoed by the BMC or ipmitool.
func (s *session) note(format string, args ...any) {
	msg := scrub(fmt.Sprintf(format, args...), s.p)
	s.evidence = append(s.evidence, time.Now().UTC().Format("2006-01-02T15:04:05.000Z")+" "+msg)
}

func messageOf(err error) string {
	var pe *plugin.Error
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
