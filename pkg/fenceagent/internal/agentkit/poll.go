package agentkit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrExpired is wrapped by PollUntil's error when time ran out before check was done.
var ErrExpired = errors.New("poll expired")

// Attempt is one call of a poll's check.
type Attempt struct {
	// N counts the attempts from 1.
	N     int
	hurry time.Duration
}

// Hurry asks for the next attempt within d of the end of this one, when that is
// sooner than the interval: a device that was just told to act may already have.
func (a *Attempt) Hurry(d time.Duration) { a.hurry = d }

// Polled is how a poll went, for the evidence and the error an agent writes.
type Polled struct {
	// Reads counts the attempts that ran to their end; one that the deadline cut short
	// says nothing about the device and is not counted.
	Reads int
	// Waited is the time from the start of the poll to its end, to the millisecond.
	Waited time.Duration
	// Last is the error of the last attempt counted, nil when that attempt succeeded.
	Last error
	// Ended is the caller's ctx.Err() when ctx, not the poll's own timeout, ended it.
	Ended error
}

// again marks an attempt's error as one the poll outlasts.
type again struct{ err error }

func (a *again) Error() string { return a.err.Error() }
func (a *again) Unwrap() error { return a.err }

// Again marks err, returned by a check, as a failed attempt that does not end the
// poll: PollUntil keeps it as Polled.Last and tries again. Again(nil) is nil.
func Again(err error) error {
	if err == nil {
		return nil
	}
	return &again{err: err}
}

// PollUntil verifies by reading back: it calls check at once and then every interval,
// counted from the start of one attempt to the start of the next, until check reports
// done with a nil error or returns an error not made by Again, or until timeout or
// ctx ends. It never
// sleeps past ctx's deadline, starts no attempt after it, and lets no attempt outlive
// it: check gets a context that ends with the poll.
//
// It returns nil when check was done, check's error when that was not made by Again,
// and otherwise an error wrapping ErrExpired and the context's error. Running out of
// time is never success: the caller writes the failure from Polled, which says what
// the last attempt saw.
func PollUntil(ctx context.Context, timeout, interval time.Duration, check func(ctx context.Context, a *Attempt) (done bool, err error)) (Polled, error) {
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var p Polled
	for n := 1; ; n++ {
		if pctx.Err() != nil {
			return p.expired(ctx, pctx, start)
		}
		a := Attempt{N: n}
		began := time.Now()
		done, err := check(pctx, &a)
		ag, isAgain := err.(*again)
		switch {
		case err == nil && done:
			p.Reads, p.Last, p.Waited = p.Reads+1, nil, since(start)
			return p, nil
		case err != nil && !isAgain:
			p.Reads, p.Waited = p.Reads+1, since(start)
			return p, err
		case err != nil && pctx.Err() != nil:
			// The deadline cut this attempt short; it says nothing about the device.
			return p.expired(ctx, pctx, start)
		}
		p.Reads, p.Last = p.Reads+1, nil
		if isAgain {
			p.Last = ag.err
		}
		next := began.Add(interval)
		if soon := time.Now().Add(a.hurry); a.hurry > 0 && soon.Before(next) {
			next = soon
		}
		if !sleepUntil(pctx, next) {
			return p.expired(ctx, pctx, start)
		}
	}
}

func (p Polled) expired(ctx, pctx context.Context, start time.Time) (Polled, error) {
	p.Waited = since(start)
	cause := pctx.Err()
	if err := ctx.Err(); err != nil {
		p.Ended, cause = err, err
	}
	return p, fmt.Errorf("%w after %d attempt(s) in %s: %w", ErrExpired, p.Reads, p.Waited, cause)
}

// sleepUntil waits until t and reports true, or false as soon as ctx ends.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

func since(start time.Time) time.Duration { return time.Since(start).Round(time.Millisecond) }
