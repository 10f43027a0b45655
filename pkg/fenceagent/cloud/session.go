package cloud

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kubefence/kubefence/pkg/fenceagent/internal/agentkit"
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
	agentkit.Evidence
	p     params
	inst  instance
	state plugin.PowerState
	// raw is the last state read, in the cloud's words; empty before the first read.
	raw string
	// lock and unlock are set when the request asks to lock the instance once it is
	// verified off by an off action (OpenStack lock=true).
	lock, unlock func(ctx context.Context) error
	// backoff overrides backoffBase when set, so tests need not wait seconds.
	backoff time.Duration
}

// Ensure brings the instance to want and verifies it by reading the state back until
// it is there. Running out of time is a failure that reports the last state read.
func (s *session) Ensure(ctx context.Context, want plugin.PowerState) error {
	sends := 0
	conflicted := false
	var last observation
	polled, err := agentkit.PollUntil(ctx, s.p.verifyTimeout, s.p.pollInterval, func(ctx context.Context, a *agentkit.Attempt) (bool, error) {
		obs, err := s.read(ctx)
		switch {
		case err != nil && plugin.KindOf(err) == plugin.KindPermanent:
			return false, err
		case err != nil:
			return false, agentkit.Again(err)
		case obs.reached(want):
			last = obs
			return true, nil
		case obs.gone && want == plugin.StateOn:
			return false, plugin.Errorf(plugin.KindPermanent, "start %s: it is %s and cannot be started again", s.inst.name(), obs.raw)
		case sends == 0 || (conflicted && !obs.transitional && sends < maxSends):
			sends++
			if conflicted, err = s.send(ctx, want); err != nil {
				return false, err
			}
			a.Hurry(firstPoll)
		}
		return false, nil
	})
	switch {
	case err == nil:
		s.noteReached(last, want, sends, polled)
		return nil
	case errors.Is(err, agentkit.ErrExpired):
		return s.notVerified(want, polled)
	}
	return err
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
		s.Note("%s refused in the current state (%s); polling", verb, s.Scrub(err.Error()))
		return true, nil
	case err != nil:
		return false, err
	}
	s.Note("sent %s, accepted", verb)
	return false, nil
}

func (s *session) noteReached(obs observation, want plugin.PowerState, sends int, polled agentkit.Polled) {
	switch {
	case obs.gone:
		s.Note("read %s: the instance is terminated, which is off for good", obs.raw)
	case sends == 0:
		s.Note("read %s: already %s, nothing sent", obs.raw, want)
	default:
		s.Note("read %s, verified %s after %d read(s) in %s", obs.raw, want, polled.Reads, polled.Waited)
	}
}

func (s *session) notVerified(want plugin.PowerState, polled agentkit.Polled) error {
	// Say whether the call's deadline or verifyTimeout ended it.
	why := "verifyTimeout " + s.p.verifyTimeout.String()
	if polled.Ended != nil {
		why = polled.Ended.Error()
	}
	if polled.Last != nil {
		s.Note("%s not verified after %d read(s) in %s (%s); last read failed", want, polled.Reads, polled.Waited, why)
		return plugin.Errorf(plugin.KindOf(polled.Last), "%s %s not verified within %s (%s): last read of the state failed: %s",
			want, s.inst.name(), polled.Waited, why, agentkit.Message(polled.Last))
	}
	last := s.raw
	if last == "" {
		last = "unread"
	}
	s.Note("%s not verified after %d read(s) in %s (%s); last read %s", want, polled.Reads, polled.Waited, why, last)
	return plugin.Errorf(plugin.KindRetryable, "%s %s not verified within %s (%s): after %d read(s) the instance is still %s",
		want, s.inst.name(), polled.Waited, why, polled.Reads, last)
}

// Lock locks the instance, when the request asks for it, once an off is verified.
func (s *session) Lock(ctx context.Context) error {
	if s.lock == nil {
		return nil
	}
	return s.lock(ctx)
}

// Unlock unlocks the instance, when the request asks for locks, before it is started.
func (s *session) Unlock(ctx context.Context) error {
	if s.unlock == nil {
		return nil
	}
	return s.unlock(ctx)
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
		s.Note("read %s (%s)", obs.raw, obs.power)
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
		msg := s.Scrub(what + ": " + ae.msg)
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
		s.Note("%s; attempt %d, retrying in %s", msg, attempt, backoff)
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
