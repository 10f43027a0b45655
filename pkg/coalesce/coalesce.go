// Package coalesce shares one read among the callers that ask for it together. A caller
// waits for a read sent after it asked, never for one already under way, so what it gets
// is as fresh as a read of its own: a hundred incidents that check the leader Lease, or
// list VolumeAttachments, at once cost a few reads instead of a hundred.
package coalesce

import (
	"context"
	"sync"
	"time"
)

// Read is a read that callers share. Do performs it under a context bounded by Timeout,
// not by any one caller's. The zero value is not usable: set Do.
type Read[T any] struct {
	Do      func(ctx context.Context) (T, error)
	Timeout time.Duration

	mu       sync.Mutex
	inFlight bool
	next     *call[T] // the read the callers asking now will share
}

// Result is one read's value. Value is shared by every caller of the read: read it,
// never change it.
type Result[T any] struct {
	// Sent is when the read was sent, after every caller that shares it asked.
	Sent  time.Time
	Value T
}

type call[T any] struct {
	Result[T]
	err     error
	done    chan struct{}
	waiters int
}

// Get returns the outcome of a read sent after the call: its value, or its error, or
// ctx's error if ctx ends first.
func (r *Read[T]) Get(ctx context.Context) (Result[T], error) {
	r.mu.Lock()
	if r.next == nil {
		r.next = &call[T]{done: make(chan struct{})}
	}
	c := r.next
	c.waiters++
	if !r.inFlight {
		r.sendLocked()
	}
	r.mu.Unlock()
	select {
	case <-c.done:
		return c.Result, c.err
	case <-ctx.Done():
		return Result[T]{}, ctx.Err()
	}
}

// Waiting reports how many callers wait for a read not yet sent.
func (r *Read[T]) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next == nil {
		return 0
	}
	return r.next.waiters
}

// sendLocked sends the waiting read; when it returns, the callers that asked meanwhile
// get the next one.
func (r *Read[T]) sendLocked() {
	c := r.next
	r.next, r.inFlight = nil, true
	c.Sent = time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), r.Timeout)
		c.Value, c.err = r.Do(ctx)
		cancel()
		close(c.done)
		r.mu.Lock()
		r.inFlight = false
		if r.next != nil {
			r.sendLocked()
		}
		r.mu.Unlock()
	}()
}
