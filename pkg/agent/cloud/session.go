package cloud

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

// Bounds of the retry loop around each API call. The call's deadline bounds it too.
const (
	maxAttempts = 8
	backoffBase = 200 * time.Millisecond
	backoffMax  = 5 * time.Second
	// maxSends bounds how often one ensure sends the same stop or start.
	maxSends = 5
	// firstPoll is the pause before the first read after a send: a cloud that acts at
	// once is seen at once, one that does not costs one extra read.
	firstPoll = 100 * time.Millisecond
)

// instance is one cloud instance behind its provider's API. Its methods return the
// API's raw errors; classify sorts them.
type instance interface {
	// name says which instance, where, for evidence and errors.
	name() string
	// stopVerb says how stop stops, for evidence: forced or not.
	stopVerb() string
	read(ctx context.Context) (observation, error)
	stop(ctx context.Context) error
	start(ctx context.Context) error
	classify(err error) apiError
}

// observation is one read of the instance state.
type observation struct {
	power plugin.PowerState
	// raw is the state in the cloud's own words, for evidence.
	raw string
	// transitional: the cloud is moving the instance between states; it is not settled
	// where power says.
	transitional bool
	// gone: terminated; off for good, it cannot be started again.
	gone bool
}

func (o observation) reached(want plugin.PowerState) bool {
	return o.power == want && !o.transitional
}

// apiError is what a provider makes of a failed API call.
type apiError struct {
	kind plugin.ErrorKind
	// retry: throttled or transient, worth another attempt within the deadline.
	retry bool
	// conflict: the action does not fit the instance's current state; poll and see.
	conflict bool
	msg      string
}

// errConflict marks a stop or start the cloud refused because of the instance state.
var errConflict = errors.New("refused in the current instance state")

// session is one call against one instance and the evidence it gathers.
type session struct {
	p       params
	inst    instance
	secrets []string
	state   plugin.PowerState
	// raw is the last state read, in the cloud's words; empty before the first read.
	raw string
	// evidence collects timestamped steps; note scrubs each.
	evidence []string
	// afterOff runs once the instance is verified off by an off action (OpenStack lock).
	afterOff func(ctx context.Context) error
	// beforeOn runs before an on action (OpenStack unlock).
	beforeOn func(ctx context.Context) error
	// backoff overrides backoffBase when set, so tests need not wait seconds.
	backoff time.Duration
}

// ensure brings the instance to want and verifies it by reading the state back until
// it is there. Running out of time is a failure that reports the last state read.
func (s *session) ensure(ctx context.Context, want plugin.PowerState) error {
	vctx, cancel := context.WithTimeout(ctx, s.p.verifyTimeout)
	defer cancel()
	start := time.Now()
	reads, sends := 0, 0
	conflicted := false
	var lastErr error
	for {
		wait := s.p.pollInterval
		obs, err := s.read(vctx)
		reads++
		switch {
		case err != nil && plugin.KindOf(err) == plugin.KindPermanent:
			return err
		case err != nil && vctx.Err() != nil:
			// Our own deadline cut this read short; it says nothing about the instance.
			return s.notVerified(vctx, want, reads-1, time.Since(start), lastErr)
		case err != nil:
			lastErr = err
		default:
			lastErr = nil
			if obs.reached(want) {
				s.noteReached(obs, want, reads, sends, time.Since(start))
				return nil
			}
			if obs.gone && want == plugin.StateOn {
				return plugin.Errorf(plugin.KindPermanent, "start %s: it is %s and cannot be started again", s.inst.name(), obs.raw)
			}
			if sends == 0 || (conflicted && !obs.transitional && sends < maxSends) {
				sends++
				conflicted, err = s.send(vctx, want)
				if err != nil {
					return err
				}
				wait = min(wait, firstPoll)
			}
		}
		select {
		case <-vctx.Done():
			return s.notVerified(vctx, want, reads, time.Since(start), lastErr)
		case <-time.After(wait):
		}
	}
}

// send asks for want once. A refusal because of the current state is no failure: the
// caller polls, and sends again once the instance has settled.
func (s *session) send(ctx context.Context, want plugin.PowerState) (conflicted bool, err error) {
	verb, fn := "start", s.inst.start
	if want == plugin.StateOff {
		verb, fn = s.inst.stopVerb(), s.inst.stop
	}
	err = s.call(ctx, verb+" "+s.inst.name(), fn)
	switch {
	case errors.Is(err, errConflict):
		s.note("%s refused in the current state (%s); polling", verb, s.scrub(err.Error()))
		return true, nil
	case err != nil:
		return false, err
	}
	s.note("sent %s, accepted", verb)
	return false, nil
}

func (s *session) noteReached(obs observation, want plugin.PowerState, reads, sends int, took time.Duration) {
	took = took.Round(time.Millisecond)
	switch {
	case obs.gone:
		s.note("read %s: the instance is terminated, which is off for good", obs.raw)
	case sends == 0:
		s.note("read %s: already %s, nothing sent", obs.raw, want)
	default:
		s.note("read %s, verified %s after %d read(s) in %s", obs.raw, want, reads, took)
	}
}

func (s *session) notVerified(ctx context.Context, want plugin.PowerState, reads int, waited time.Duration, lastErr error) error {
	waited = waited.Round(time.Millisecond)
	// The context's error says whether the call's deadline or verifyTimeout ended it.
	why := "verifyTimeout " + s.p.verifyTimeout.String()
	if err := ctx.Err(); err != nil {
		why = err.Error()
	}
	if lastErr != nil {
		s.note("%s not verified after %d read(s) in %s (%s); last read failed", want, reads, waited, why)
		return plugin.Errorf(plugin.KindOf(lastErr), "%s %s not verified within %s (%s): last read of the state failed: %s",
			want, s.inst.name(), waited, why, messageOf(lastErr))
	}
	last := s.raw
	if last == "" {
		last = "unread"
	}
	s.note("%s not verified after %d read(s) in %s (%s); last read %s", want, reads, waited, why, last)
	return plugin.Errorf(plugin.KindRetryable, "%s %s not verified within %s (%s): after %d read(s) the instance is still %s",
		want, s.inst.name(), waited, why, reads, last)
}

// read reads the state once, records it and notes changes in the evidence.
func (s *session) read(ctx context.Context) (observation, error) {
	var obs observation
	err := s.call(ctx, "read state of "+s.inst.name(), func(ctx context.Context) error {
		var err error
		obs, err = s.inst.read(ctx)
		return err
	})
	if err != nil {
		return observation{power: plugin.StateUnknown}, err
	}
	if obs.raw != s.raw {
		s.note("read %s (%s)", obs.raw, obs.power)
	}
	s.state = obs.power
	s.raw = obs.raw
	return obs, nil
}

// call runs one API call, retrying throttled and transient failures with exponential
// backoff while the deadline and maxAttempts allow. It returns typed plugin errors, or
// an error wrapping errConflict.
func (s *session) call(ctx context.Context, what string, fn func(context.Context) error) error {
	backoff := backoffBase
	if s.backoff > 0 {
		backoff = s.backoff
	}
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		ae := s.inst.classify(err)
		msg := s.scrub(what + ": " + ae.msg)
		switch {
		case ae.conflict:
			return fmt.Errorf("%s: %w", msg, errConflict)
		case ctx.Err() != nil:
			return plugin.Errorf(giveUpKind(ae), "%s (%v after %d attempt(s))", msg, ctx.Err(), attempt)
		case !ae.retry:
			return plugin.Errorf(ae.kind, "%s", msg)
		case attempt >= maxAttempts:
			return plugin.Errorf(giveUpKind(ae), "%s (gave up after %d attempts)", msg, attempt)
		}
		s.note("%s; attempt %d, retrying in %s", msg, attempt, backoff)
		select {
		case <-ctx.Done():
			return plugin.Errorf(giveUpKind(ae), "%s (%v after %d attempt(s))", msg, ctx.Err(), attempt)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, backoffMax)
	}
}

// giveUpKind is the kind of a retried failure that outlived its retries: throttling
// stays retryable, a cloud API that did not answer is unreachable.
func giveUpKind(ae apiError) plugin.ErrorKind {
	if ae.kind == plugin.KindPermanent {
		return plugin.KindPermanent
	}
	if ae.kind == plugin.KindTargetUnreachable {
		return plugin.KindTargetUnreachable
	}
	return plugin.KindRetryable
}

func (s *session) result() plugin.Result {
	return plugin.Result{State: s.state, Evidence: strings.Join(s.evidence, "; ")}
}

// note adds a timestamped step to the evidence, with every secret scrubbed.
func (s *session) note(format string, args ...any) {
	msg := s.scrub(fmt.Sprintf(format, args...))
	s.evidence = append(s.evidence, time.Now().UTC().Format("2006-01-02T15:04:05.000Z")+" "+msg)
}

// scrub removes credentials from text that came back from a cloud API or SDK, which
// may echo them. A mangled message is better than a leaked secret.
func (s *session) scrub(text string) string {
	return scrubSecrets(text, s.secrets)
}

func scrubSecrets(text string, secrets []string) string {
	for _, v := range secrets {
		if v != "" {
			text = strings.ReplaceAll(text, v, "<redacted>")
		}
	}
	return text
}

func messageOf(err error) string {
	var pe *plugin.Error
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}
