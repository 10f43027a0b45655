package coalesce

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Batch is a read of many keys that callers share: the keys asked for together go out
// in one read, sent after every one of them was asked, so each caller gets a value as
// fresh as a read of its own. Do performs it under a context bounded by Timeout, not by
// any one caller's; a key Do leaves out of its map has no value (not found). The zero
// value is not usable: set Do.
type Batch[K comparable, T any] struct {
	Do      func(ctx context.Context, keys []K) (map[K]T, error)
	Timeout time.Duration

	mu       sync.Mutex
	inFlight bool
	next     *batchCall[K, T]
}

type batchCall[K comparable, T any] struct {
	keys   []K
	values map[K]T
	err    error
	done   chan struct{}
}

// Get returns key's value from a read sent after the call, whether the read found it,
// and the read's error, or ctx's error if ctx ends first.
func (b *Batch[K, T]) Get(ctx context.Context, key K) (T, bool, error) {
	b.mu.Lock()
	if b.next == nil {
		b.next = &batchCall[K, T]{done: make(chan struct{})}
	}
	c := b.next
	if !slices.Contains(c.keys, key) {
		c.keys = append(c.keys, key)
	}
	if !b.inFlight {
		b.sendLocked()
	}
	b.mu.Unlock()
	var zero T
	select {
	case <-c.done:
		if c.err != nil {
			return zero, false, c.err
		}
		v, ok := c.values[key]
		return v, ok, nil
	case <-ctx.Done():
		return zero, false, ctx.Err()
	}
}

// sendLocked sends the waiting keys; the callers that ask meanwhile get the next read.
func (b *Batch[K, T]) sendLocked() {
	c := b.next
	b.next, b.inFlight = nil, true
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), b.Timeout)
		c.values, c.err = b.Do(ctx, c.keys)
		cancel()
		close(c.done)
		b.mu.Lock()
		b.inFlight = false
		if b.next != nil {
			b.sendLocked()
		}
		b.mu.Unlock()
	}()
}
