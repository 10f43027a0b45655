package agentkit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kubefence/kubefence/pkg/plugin"
)

var (
	errUnreachable = plugin.Errorf(plugin.KindTargetUnreachable, "no answer")
	errPermanent   = plugin.Errorf(plugin.KindPermanent, "credentials rejected")
)

// doneAt is a check that is done at attempt n and reads "not yet" before.
func doneAt(n int) func(context.Context, *Attempt) (bool, error) {
	return func(_ context.Context, a *Attempt) (bool, error) { return a.N >= n, nil }
}

func TestPollUntil(t *testing.T) {
	tests := map[string]struct {
		// deadline bounds the caller's ctx when set; cancelled cancels it at once.
		deadline  time.Duration
		cancelled bool
		timeout   time.Duration
		interval  time.Duration
		check     func(ctx context.Context, a *Attempt) (bool, error)
		wantErr   error // nil, or what errors.Is finds in the error
		wantKind  plugin.ErrorKind
		wantReads int
		wantLast  error
		wantEnded error
		// within bounds the whole poll, far below interval where that matters.
		within time.Duration
	}{
		"done at once": {
			timeout: time.Second, interval: time.Hour, check: doneAt(1), wantReads: 1, within: time.Second,
		},
		"done on the third read": {
			timeout: 5 * time.Second, interval: time.Millisecond, check: doneAt(3), wantReads: 3, within: 2 * time.Second,
		},
		"a final error ends the poll with its kind": {
			timeout: 5 * time.Second, interval: time.Millisecond,
			check: func(_ context.Context, a *Attempt) (bool, error) {
				if a.N == 2 {
					return false, errPermanent
				}
				return false, nil
			},
			wantErr: errPermanent, wantKind: plugin.KindPermanent, wantReads: 2, within: 2 * time.Second,
		},
		"failed reads are kept until the timeout": {
			timeout: 60 * time.Millisecond, interval: 5 * time.Millisecond,
			check:   func(context.Context, *Attempt) (bool, error) { return false, Again(errUnreachable) },
			wantErr: ErrExpired, wantKind: plugin.KindRetryable, wantReads: -1, wantLast: errUnreachable,
			within: 2 * time.Second,
		},
		"a good read clears the last failure": {
			timeout: 60 * time.Millisecond, interval: 5 * time.Millisecond,
			check: func(_ context.Context, a *Attempt) (bool, error) {
				if a.N == 1 {
					return false, Again(errUnreachable)
				}
				return false, nil
			},
			wantErr: ErrExpired, wantReads: -1, within: 2 * time.Second,
		},
		"again of nil is a read that is not done": {
			timeout: 30 * time.Millisecond, interval: 5 * time.Millisecond,
			check:   func(context.Context, *Attempt) (bool, error) { return false, Again(nil) },
			wantErr: ErrExpired, wantReads: -1, within: 2 * time.Second,
		},
		"the caller's deadline comes before the timeout": {
			deadline: 60 * time.Millisecond, timeout: time.Hour, interval: 5 * time.Millisecond, check: doneAt(1 << 30),
			wantErr: context.DeadlineExceeded, wantReads: -1, wantEnded: context.DeadlineExceeded, within: 2 * time.Second,
		},
		"a cancelled caller gets no attempt": {
			cancelled: true, timeout: time.Hour, interval: time.Millisecond, check: doneAt(1),
			wantErr: context.Canceled, wantReads: 0, wantEnded: context.Canceled, within: time.Second,
		},
		"never sleeps past the deadline": {
			timeout: 50 * time.Millisecond, interval: time.Hour, check: doneAt(2),
			wantErr: ErrExpired, wantReads: 1, within: 2 * time.Second,
		},
		"a read the deadline cuts short is not counted": {
			timeout: 50 * time.Millisecond, interval: time.Millisecond,
			check: func(ctx context.Context, a *Attempt) (bool, error) {
				if a.N == 1 {
					return false, Again(errUnreachable)
				}
				<-ctx.Done()
				return false, Again(ctx.Err())
			},
			wantErr: ErrExpired, wantKind: plugin.KindRetryable, wantReads: 1, wantLast: errUnreachable, within: 2 * time.Second,
		},
		"a final error cut short still ends the poll as it is": {
			timeout: 30 * time.Millisecond, interval: time.Millisecond,
			check: func(ctx context.Context, _ *Attempt) (bool, error) {
				<-ctx.Done()
				return false, errPermanent
			},
			wantErr: errPermanent, wantKind: plugin.KindPermanent, wantReads: 1, within: 2 * time.Second,
		},
		"hurry brings the next read forward": {
			timeout: 5 * time.Second, interval: time.Hour,
			check: func(_ context.Context, a *Attempt) (bool, error) {
				a.Hurry(time.Millisecond)
				return a.N == 3, nil
			},
			wantReads: 3, within: 2 * time.Second,
		},
		"hurry never slows a read down": {
			timeout: 5 * time.Second, interval: time.Millisecond,
			check: func(_ context.Context, a *Attempt) (bool, error) {
				a.Hurry(time.Hour)
				return a.N == 3, nil
			},
			wantReads: 3, within: 2 * time.Second,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.deadline > 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			if tc.cancelled {
				cancel()
			}
			calls := 0
			start := time.Now()
			polled, err := PollUntil(ctx, tc.timeout, tc.interval, func(ctx context.Context, a *Attempt) (bool, error) {
				calls++
				if a.N != calls {
					t.Errorf("attempt %d numbered %d", calls, a.N)
				}
				if d, ok := ctx.Deadline(); !ok || time.Until(d) > tc.timeout {
					t.Errorf("check's ctx has deadline %v (%t), want one within the timeout", d, ok)
				}
				return tc.check(ctx, a)
			})
			elapsed := time.Since(start)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("poll = %v, want done", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("poll = %v, want %v", err, tc.wantErr)
			}
			if tc.wantKind != "" && plugin.KindOf(err) != tc.wantKind {
				t.Errorf("kind %s, want %s", plugin.KindOf(err), tc.wantKind)
			}
			if tc.wantReads >= 0 && polled.Reads != tc.wantReads {
				t.Errorf("reads %d, want %d", polled.Reads, tc.wantReads)
			}
			if tc.wantReads < 0 && (polled.Reads < 2 || polled.Reads > calls) {
				t.Errorf("reads %d of %d calls, want several", polled.Reads, calls)
			}
			if polled.Last != tc.wantLast || polled.Ended != tc.wantEnded {
				t.Errorf("last %v ended %v, want %v and %v", polled.Last, polled.Ended, tc.wantLast, tc.wantEnded)
			}
			if elapsed > tc.within {
				t.Errorf("took %s, want at most %s", elapsed, tc.within)
			}
			if polled.Waited > elapsed.Round(time.Millisecond)+time.Millisecond {
				t.Errorf("waited %s, longer than the %s it took", polled.Waited, elapsed)
			}
		})
	}
}

// TestPollUntilExpiresOnTime checks that an expired poll returns close to its
// deadline: neither early nor after the next interval.
func TestPollUntilExpiresOnTime(t *testing.T) {
	const timeout = 100 * time.Millisecond
	start := time.Now()
	polled, err := PollUntil(context.Background(), timeout, 40*time.Millisecond, doneAt(1<<30))
	elapsed := time.Since(start)
	if !errors.Is(err, ErrExpired) || !errors.Is(err, context.DeadlineExceeded) || polled.Ended != nil {
		t.Fatalf("poll = %v (ended %v), want expired by its own timeout", err, polled.Ended)
	}
	if elapsed < timeout || elapsed > timeout+time.Second {
		t.Errorf("returned after %s, want just after %s", elapsed, timeout)
	}
	if polled.Reads < 2 || polled.Reads > 3 {
		t.Errorf("reads %d, want 3 (at 0, 40 and 80ms), or 2 on a slow machine", polled.Reads)
	}
}
